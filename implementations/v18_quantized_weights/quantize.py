"""v18's own formats, made at load from float weights (build option weights="int8" or "int4"):

- int8, per output channel: q = round(w / scale) in [-127, 127], each row's scale its largest
  magnitude times a clipping ratio (1, 0.975, ..., 0.7) over 127, the ratio whose integers fit
  the row best (least squared error): one scale a row, where clipping a rare outlier buys the
  other weights finer steps. On the default model's chat prompts this took top-1 agreement from
  0.980 to 0.990 (99 positions; docs/probes/quantized_accuracy.py).
- int4, in groups of columns with a scale and a minimum (the zero point, held as the value
  level 0 stands for, as GGUF's Q4_1 holds it): each group's range [lo, hi] is cut into 15 steps,
  scale = (hi - lo) / 15, q = round((w - lo) / scale) in [0, 15]. 16 levels cannot absorb a
  row's outliers, so each group of group_size columns has its own scale, and the minimum lets a
  lopsided group use every level. Why a minimum and not an integer zero point: an integer one
  moves the grid by whole steps, and on the default model, whose float weights are themselves a
  Q4_1 grid, it lands between that grid's points: top-1 agreement 0.68 against 1.00
  (docs/probes/quantized_accuracy.py measures the formats).

Scales and minimums are rounded to float16 before q is computed from them, so q is the best integer for the
scale the kernels will read. A matrix whose column count is not a whole number of 32-column runs
stays float (the packed layout's unit; QuantizedTensor), as do the norms' vectors."""
from __future__ import annotations

import torch

from torchlet.contract import QuantizedTensor

RUN = QuantizedTensor.RUN  # columns of a packed 4-bit run: every group is whole runs

INT8_LEVELS, INT4_STEPS = 127, 15
# int8 scales tried, as fractions of a row's largest magnitude (see the module)
CLIPS = [1.0 - 0.025 * i for i in range(13)]
CHUNK_ROWS = 1024  # rows whose clipping search runs together (see int8_per_channel)


def group_for(cols: int, wanted: int) -> int | None:
    """The largest group of at most `wanted` columns that is whole runs and divides cols."""
    for group in range(min(wanted, cols) // RUN * RUN, 0, -RUN):
        if cols % group == 0:
            return group
    return None


def scale16(x: torch.Tensor) -> torch.Tensor:
    """A positive float16 scale (a zero range gets 1: its q are all 0 then)."""
    return torch.where(x > 0, x, torch.ones_like(x)).to(torch.float16)


def int8_per_channel(w: torch.Tensor) -> QuantizedTensor | None:
    rows, cols = w.shape
    if group_for(cols, cols) != cols:
        return None
    w = w.float()
    amax = w.abs().amax(dim=1, keepdim=True)
    scale = torch.empty_like(amax, dtype=torch.float16)
    for start in range(0, rows, CHUNK_ROWS):  # a few MB at a time: the search stays in cache
        part, top = w[start:start + CHUNK_ROWS], amax[start:start + CHUNK_ROWS]
        best_err = best = None
        for ratio in CLIPS:  # the row's scale: the clipping whose integers fit it best
            s = scale16(top * ratio / INT8_LEVELS)
            err = (torch.round(part / s.float()).clamp(-INT8_LEVELS, INT8_LEVELS) * s.float()
                   - part).square().sum(dim=1, keepdim=True)
            if best is None:
                best_err, best = err, s
            else:
                better = err < best_err  # strictly: the first ratio wins a tie
                best_err, best = torch.where(better, err, best_err), torch.where(better, s, best)
        scale[start:start + CHUNK_ROWS] = best
    q = torch.round(w / scale.float()).clamp(-INT8_LEVELS, INT8_LEVELS).to(torch.int8)
    return QuantizedTensor(8, q, scale, cols, name="int8")


def int4_groups(w: torch.Tensor, group_size: int) -> QuantizedTensor | None:
    rows, cols = w.shape
    group = group_for(cols, group_size)
    if group is None:
        return None
    g = w.float().view(rows, cols // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    scales, mins = scale16((hi - lo) / INT4_STEPS), lo.to(torch.float16)
    q = torch.round((g - mins.float()[..., None]) / scales.float()[..., None]).clamp(0, INT4_STEPS)
    return QuantizedTensor(4, pack4(q.to(torch.uint8).view(rows, cols)), scales, group,
                           mins=mins, name=f"int4 (groups of {group})")


def pack4(q: torch.Tensor) -> torch.Tensor:
    """uint8 [rows, cols] of values 0..15 packed as QuantizedTensor keeps 4-bit q: each run of
    32 columns in 16 bytes, column j low, column j + 16 high."""
    rows, cols = q.shape
    runs = q.view(rows, cols // RUN, 2, RUN // 2)
    return (runs[:, :, 0] | (runs[:, :, 1] << 4)).reshape(rows, cols // 2)


def quantize(w: torch.Tensor, fmt: str, group_size: int) -> QuantizedTensor | None:
    """w [rows, cols] in fmt ("int8" or "int4"), or None where its columns are not whole runs."""
    return int8_per_channel(w) if fmt == "int8" else int4_groups(w, group_size)
