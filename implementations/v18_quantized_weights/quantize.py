"""v18's own formats, made at load from float weights (build option weights="int8" or "int4"):

- int8, per output channel: q = round(w / scale) in [-127, 127], each row's scale its largest
  magnitude times a clipping ratio (1, 0.975, ..., 0.7) over 127, the ratio whose integers fit
  the row best (least squared error): one scale a row, where clipping a rare outlier buys the
  other weights finer steps. On the default model's chat prompts this took top-1 agreement from
  0.980 to 0.990 (99 positions; docs/probes/quantized_accuracy.py).
- int4, in groups of columns with a scale and a minimum (the zero point, held as the value
  level 0 stands for, as GGUF's Q4_1 holds it): q = round((w - min) / scale) in [0, 15]. 16
  levels cannot absorb a row's outliers, so each group of group_size columns has its own scale,
  and the minimum lets a lopsided group use every level. Why a minimum and not an integer zero
  point: an integer one moves the grid by whole steps, and on the default model, whose float
  weights are themselves a Q4_1 grid, it lands between that grid's points: top-1 agreement 0.68
  against 1.00 (docs/probes/quantized_accuracy.py measures the formats).
  Which (scale, min): the group's range cut into 15 steps puts a level on its two extremes,
  which a wider group pays for in every other weight. So, as GGUF's k-quants fit theirs, a few
  candidates are tried and the one of least squared error kept: the range's grid; levels as if
  the range held 14 to 16 steps, each with the least-squares line (scale, min) through its levels;
  then twice the best grid's own levels fitted again. On the default model's chat prompts
  (docs/probes/quantized_accuracy.py, 99 positions) this took groups of 64 from top-1 0.75 and
  mean KL 0.40 to 0.82 and 0.27, groups of 128 from 0.73 and 0.65 to 0.75 and 0.43 (groups of 32
  stay 1.00: the model's own Q4_1 grid is the range's). Still short of the issue's 0.90: every
  matrix kind costs some (int4 at 128 on q/k/v/o alone: 0.90; gate/up alone: 0.91). Unweighted:
  weighting columns by the square of the norm weight before them, or by that times the
  embedding rows' mean square, measured worse at groups of 64 (top-1 0.84 and 0.83 against 0.85,
  in a trial with 21 step counts).

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
# int4 candidates (see the module): the step counts a group's range is cut into, each followed
# by a least-squares fit to its levels, then REFITS fits of the best grid's own levels. 5 counts
# and 2 refits kept 99% of 21 counts and 4 refits' error cut on the default model's layers, at a
# third of the time
STEP_COUNTS = [14.0, 14.5, 15.0, 15.5, 16.0]
REFITS = 2


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
    work = w.new_empty(min(rows, CHUNK_ROWS), cols)  # each candidate's error, computed in place
    for start in range(0, rows, CHUNK_ROWS):  # a few MB at a time: the search stays in cache
        part, top = w[start:start + CHUNK_ROWS], amax[start:start + CHUNK_ROWS]
        here = work[:part.shape[0]]
        best_err = best = None
        for ratio in CLIPS:  # the row's scale: the clipping whose integers fit it best
            s = scale16(top * ratio / INT8_LEVELS)
            f = s.float()
            # (round(part / s).clamp(...) * s - part)^2, op for op, in one buffer
            err = (torch.div(part, f, out=here).round_().clamp_(-INT8_LEVELS, INT8_LEVELS)
                   .mul_(f).sub_(part).square_().sum(dim=1, keepdim=True))
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
    scales = torch.empty(g.shape[:2], dtype=torch.float16)
    mins = torch.empty_like(scales)
    for start in range(0, rows, CHUNK_ROWS // 2):  # a few MB at a time, as int8_per_channel
        part = slice(start, start + CHUNK_ROWS // 2)
        scales[part], mins[part] = int4_fit(g[part])
    q = torch.round((g - mins.float()[..., None]) / scales.float()[..., None]).clamp(0, INT4_STEPS)
    return QuantizedTensor(4, pack4(q.to(torch.uint8).view(rows, cols)), scales, group,
                           mins=mins, name=f"int4 (groups of {group})")


def int4_fit(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each group's float16 (scale, min), g [rows, groups, group]: the least squared error of
    the candidates (see the module), the first such on a tie."""
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    span = hi - lo
    best = (scale16(span / INT4_STEPS), lo.to(torch.float16))  # the range's own grid
    best_err = int4_error(g, *best)
    for steps in STEP_COUNTS:
        # levels as if the range held `steps` steps, then the scale and min that fit them best
        levels = torch.round((g - lo) * (steps / torch.where(span > 0, span, 1.0)))
        best, best_err = better_of(g, best, best_err, least_squares(g, levels.clamp(0, INT4_STEPS)))
    for _ in range(REFITS):  # the best grid's own levels, fitted again
        levels = torch.round((g - best[1].float()) / best[0].float()).clamp(0, INT4_STEPS)
        best, best_err = better_of(g, best, best_err, least_squares(g, levels))
    return best[0].squeeze(-1), best[1].squeeze(-1)


def least_squares(g: torch.Tensor, levels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The float16 (scale, min) minimising sum (scale * level + min - w)^2 over each group (the
    normal equations of a line through (level, w)); a group of one level keeps scale 1."""
    n = g.shape[-1]
    sl, sw = levels.sum(-1, keepdim=True), g.sum(-1, keepdim=True)
    sll, slw = (levels * levels).sum(-1, keepdim=True), (levels * g).sum(-1, keepdim=True)
    det = n * sll - sl * sl
    scale = (n * slw - sl * sw) / torch.where(det > 0, det, 1.0)
    scale16_ = scale16(torch.where(det > 0, scale, 0.0))
    # the min for the scale as float16 will hold it: the mean residual
    return scale16_, ((sw - scale16_.float() * sl) / n).to(torch.float16)


def int4_error(g: torch.Tensor, scale: torch.Tensor, mn: torch.Tensor) -> torch.Tensor:
    """Each group's squared error with (scale, min) as stored and the nearest levels."""
    s, m = scale.float(), mn.float()
    # (round((g - m) / s).clamp(...) * s + m - g)^2, op for op, in one buffer
    return ((g - m).div_(s).round_().clamp_(0, INT4_STEPS).mul_(s).add_(m).sub_(g).square_()
            .sum(-1, keepdim=True))


def better_of(g, best, best_err, candidate):
    err = int4_error(g, *candidate)
    won = err < best_err  # strictly: the earlier candidate wins a tie
    return ((torch.where(won, candidate[0], best[0]), torch.where(won, candidate[1], best[1])),
            torch.where(won, err, best_err))


def pack4(q: torch.Tensor) -> torch.Tensor:
    """uint8 [rows, cols] of values 0..15 packed as QuantizedTensor keeps 4-bit q: each run of
    32 columns in 16 bytes, column j low, column j + 16 high."""
    rows, cols = q.shape
    runs = q.view(rows, cols // RUN, 2, RUN // 2)
    return (runs[:, :, 0] | (runs[:, :, 1] << 4)).reshape(rows, cols // 2)


def quantize(w: torch.Tensor, fmt: str, group_size: int) -> QuantizedTensor | None:
    """w [rows, cols] in fmt ("int8" or "int4"), or None where its columns are not whole runs."""
    return int8_per_channel(w) if fmt == "int8" else int4_groups(w, group_size)
