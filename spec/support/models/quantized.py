"""Quantized checkpoints the specs make themselves, from a float checkpoint's matrices:

- GGUF's own blocks (Q8_0, Q4_0, Q4_1), made by the `gguf` package's quantizer and read into the
  contract's QuantizedTensor (the layout its docstring gives);
- the issue's int8 (per output channel, scale = max |w| / 127 rounded to float16) and int4
  (groups with a scale and a minimum, both float16, fitted by least squares to the group;
  q = round((w - min) / scale) in [0, 15]), written here as the definitions the engine's own
  quantizer must meet.

A spec builds an engine on such a checkpoint (weights="auto": as stored) and compares it with a
float64 engine built on `dequantized(...)`: the same weights, no integers."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from torchlet.contract import Checkpoint, QuantizedTensor

RUN = QuantizedTensor.RUN
BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}
# what int4 keeps at 8 bits: the embedding and the LM head, which every logit reads
EIGHT_BIT = ("model.embed_tokens.weight", "lm_head.weight")


def gguf_blocks(w: torch.Tensor, kind: str) -> QuantizedTensor:
    """w [rows, cols] quantized by gguf into `kind` blocks, read as a QuantizedTensor."""
    import gguf
    from gguf.quants import quantize

    rows, cols = w.shape
    raw = torch.from_numpy(quantize(w.float().numpy().astype(np.float32),
                                    gguf.GGMLQuantizationType[kind]).copy())
    blocks = raw.view(rows, cols // RUN, BLOCK_BYTES[kind])
    d = blocks[..., 0:2].contiguous().view(torch.float16).squeeze(-1)
    if kind == "Q8_0":
        q = blocks[..., 2:].contiguous().view(torch.int8).reshape(rows, cols)
        return QuantizedTensor(8, q, d, RUN, name=kind)
    if kind == "Q4_0":
        q = blocks[..., 2:].reshape(rows, cols // 2).contiguous()
        return QuantizedTensor(4, q, d, RUN, zeros=torch.full_like(d, 8, dtype=torch.uint8),
                               name=kind)
    m = blocks[..., 2:4].contiguous().view(torch.float16).squeeze(-1)
    return QuantizedTensor(4, blocks[..., 4:].reshape(rows, cols // 2).contiguous(), d, RUN,
                           mins=m, name=kind)


def int8_per_channel(w: torch.Tensor) -> QuantizedTensor:
    """Each row's scale: max |w| times the clipping ratio among 1, 0.975, ..., 0.7 whose
    integers are closest to the row (least squares; the first such ratio on a tie), over 127,
    rounded to float16."""
    w = w.float()
    amax = w.abs().amax(dim=1, keepdim=True)
    scales, errors = [], []
    for i in range(13):
        s = amax * (1.0 - 0.025 * i) / 127
        s = torch.where(s > 0, s, torch.ones_like(s)).to(torch.float16)
        q = torch.round(w / s.float()).clamp(-127, 127)
        scales.append(s)
        errors.append((q * s.float() - w).square().sum(dim=1, keepdim=True))
    best = torch.stack(errors).argmin(dim=0, keepdim=True)  # the first least, on a tie
    scale = torch.stack(scales).gather(0, best)[0]
    q = torch.round(w / scale.float()).clamp(-127, 127).to(torch.int8)
    return QuantizedTensor(8, q, scale, w.shape[1], name="int8")


def int4_groups(w: torch.Tensor, group: int) -> QuantizedTensor:
    """Each group's (scale, min), both float16, the one of least squared error (the first on a
    tie) among: the range's own grid (scale = (hi - lo) / 15, min = lo); for t in 14, 14.5, 15,
    15.5, 16, the least-squares line through the levels round((w - lo) * t / (hi - lo)) clamped
    to [0, 15]; then, twice, the least-squares line through the best grid's own levels. A
    least-squares line: scale from the normal equations, rounded to float16, min the mean of
    w - scale * level, rounded to float16. q = round((w - min) / scale) in [0, 15]."""
    rows, cols = w.shape
    g = w.float().view(rows, cols // group, group)

    def half_scale(x):
        return torch.where(x > 0, x, torch.ones_like(x)).to(torch.float16)

    def error(scale, mn):
        q = torch.round((g - mn.float()) / scale.float()).clamp(0, 15)
        return (q * scale.float() + mn.float() - g).square().sum(-1, keepdim=True)

    def line(levels):
        n, sl, sw = group, levels.sum(-1, keepdim=True), g.sum(-1, keepdim=True)
        sll, slw = (levels * levels).sum(-1, keepdim=True), (levels * g).sum(-1, keepdim=True)
        det = n * sll - sl * sl
        solvable = det > 0
        scale = half_scale(torch.where(solvable, (n * slw - sl * sw) / torch.where(
            solvable, det, 1.0), 0.0))
        return scale, ((sw - scale.float() * sl) / n).to(torch.float16)

    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    span = hi - lo
    scale, mn = half_scale(span / 15), lo.to(torch.float16)
    err = error(scale, mn)

    def keep_better(candidate):
        nonlocal scale, mn, err
        e = error(*candidate)
        won = e < err
        scale, mn = torch.where(won, candidate[0], scale), torch.where(won, candidate[1], mn)
        err = torch.where(won, e, err)

    safe_span = torch.where(span > 0, span, 1.0)
    for t in (14.0, 14.5, 15.0, 15.5, 16.0):
        keep_better(line(torch.round((g - lo) * (t / safe_span)).clamp(0, 15)))
    for _ in range(2):
        keep_better(line(torch.round((g - mn.float()) / scale.float()).clamp(0, 15)))
    scales, mins = scale.squeeze(-1), mn.squeeze(-1)
    q = torch.round((g - mins.float()[..., None]) / scales.float()[..., None]).clamp(0, 15)
    q = q.to(torch.uint8).view(rows, cols // RUN, 2, RUN // 2)
    packed = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(rows, cols // 2)
    return QuantizedTensor(4, packed, scales, group, mins=mins, name="int4")


def quantized(ckpt: Checkpoint, kind: str, group: int = RUN) -> Checkpoint:
    """The checkpoint with every matrix whose columns are whole groups in `kind` ("Q8_0",
    "Q4_0", "Q4_1", "int8", "int4"; int4's embedding and LM head int8); the rest as they
    are."""
    def one(name, w):
        if w.dim() != 2 or w.shape[1] % (RUN if kind != "int4" else group):
            return w
        if kind == "int8" or (kind == "int4" and name in EIGHT_BIT):
            return int8_per_channel(w)
        if kind == "int4":
            return int4_groups(w, group)
        return gguf_blocks(w, kind)
    return replace(ckpt, tensors={k: one(k, v) for k, v in ckpt.tensors.items()})


def agreement(engine, expected, sequences) -> tuple[int, float, float]:
    """(distinct positions, top-1 agreement, mean KL(expected || engine)) over every position of
    the sequences, a position the sequences share counted once; expected: the reference's
    float64 logits of each sequence."""
    seen = {}
    for s, ref in zip(sequences, expected):
        got = engine.logits(s).double()
        for i in range(len(s)):
            p, q = ref[i].log_softmax(-1), got[i].log_softmax(-1)
            seen.setdefault(tuple(s[:i + 1]), (bool(got[i].argmax() == ref[i].argmax()),
                                               float((p.exp() * (p - q)).sum())))
    return (len(seen), sum(a for a, _ in seen.values()) / len(seen),
            sum(k for _, k in seen.values()) / len(seen))
