"""v18's products on the GPU: x [M, K] times a QuantizedTensor [N, K]
(torchlet/contract/quantized.py), read as stored (int8 bytes, or two int4 columns a byte) and
dequantized in registers.

Two kernels, chosen by the number of rows M (`linear`):

- gemv (M <= GEMV_MAX_M): CUDA-core sums. A program reads BLOCK_N weight rows in BLOCK_K-wide
  chunks, each byte once, and multiplies it by every one of the M rows of x (held in L1: x is
  tiny). At a few rows a product is a read of the weights, so its time is bytes over bandwidth,
  and int8 reads half of bf16's bytes, int4 a quarter. A long K is split over programs, whose
  float32 partial sums a second small launch adds in a fixed order (v13's gemv does the same).
- matmul (M > GEMV_MAX_M): tensor cores. A program dequantizes a [BLOCK_N, GW] slice of weights
  in registers to x's dtype and feeds it to tl.dot with x's [BLOCK_M, GW] tile; each weight byte
  is read once per BLOCK_M rows of x, and never written back as floats.

How a weight becomes a float, cheaply and exactly: the integer is OR-ed (or added) into the
mantissa of 2^23 (float bits 0x4B000000), which makes the float 2^23 + q with no int-to-float
conversion instruction (the CUDA guide's throughput table puts conversions at a fraction of the
FMA rate; a batch-1 int4 read needs ~10^13 of them a second; this choice was not itself timed
against a plain cast); one float subtraction of 2^23 + zero then leaves q - zero exactly. A
run of 32 int4 columns is 16 bytes: its low nibbles are columns 0..15, its high ones 16..31, so
the kernels never interleave nibbles: they multiply the low nibbles by x's columns 0..15 of the run
and the high ones by 16..31 (two half-width products).

Scales: the gemv kernel sums q * x over a slice of GW columns that share one scale (GW the
largest power of two dividing the group, at most BLOCK_K) and multiplies the slice's sum by
the scale once: sum s*(q - z)*x + m*x = s * sum (q - z)*x + m * sum x. For a single group per row
(int8 per output channel) the scale is applied once, at the end. The matmul kernel dequantizes
each element (w = s*(q - z) + m, rounded to x's dtype, as cuBLAS on a bf16 copy would see it),
one group slice per K step.

Sums are float32; the output (bias added in float32 first) is rounded once to x's dtype. Under
TRITON_INTERPRET=1 on CPU x is float32 and tl.dot runs exact ("ieee"), as on a GPU in float32.

Measured on the H200 (docs/probes/quantized_gpu_kernels.py at 6b4ddc6; us per call, one pair of
CUDA events around each call, no graph, so every number carries a floor of about 5 us: SmolLM2's
smallest matrices take 5-6 us whatever their bytes). Copy ceiling 4.26 TB/s. Constants, and the
sweeps behind them, are next to each one below.

- One row, Qwen3-0.6B: int8 gemv 6.6 / 7.4 / 7.3 / 8.7 / 58.8 us for q/k/v, o, gate/up, down and
  the LM head, against bf16 cuBLAS's 7.8 / 15.6 / 8.8 / 9.9 / 79.0: a step's products 0.90 ms
  against 1.26 (event-timed; 0.82 predicted with the tuned plans below, not yet re-measured).
  The LM head's int8 read runs at 2.65 TB/s (cuBLAS's bf16 at 3.94); int4 runs slower than int8
  there (76 us, 1.1 TB/s): at half a byte a weight the gemv's unpacking, not memory, limits it.
- At 8 and more rows the matmul at 6b4ddc6 lost to bf16 cuBLAS at every shape (Qwen3, 256 rows:
  int8 18.9 / 31.4 / 18.4 / 44.2 / 263 us against 8.3 / 9.2 / 10.3 / 10.9 / 123). Cause: too
  few programs. o and down (1,024 weight rows) made 16 tiles of 128 x 128 for 132 SMs, each
  walking all of K; at 8-32 rows the time was flat (10.5-20.7 us), the latency of one program's
  walk. Hence the split of K over programs when tiles are few (matmul_split): reasoned from
  that, NOT yet measured, like the tiles (the tile sweep did not finish in the first call).
- On an H100 (2026-12-05, docs/probes/int8_matmul_tiles.py) the tiles, the split and two other
  int8 kernels (the weights loaded K-major and cast straight to bf16; the weights as the dot's
  first operand) all stay 1.2-1.6x bf16 cuBLAS at 64-256 rows: a small matrix takes 10-17 us
  against cuBLAS's 8-11 (a pipelined wgmma kernel's latency, not the bytes, bounds both), and
  the LM head at 256 rows is compute-bound (186 us at best against 145). Hence v18 on a GPU pays
  at large batches what it buys at small ones (docs/benchmarks.md, the quantized decode step).
- Dequantizing into a bf16 scratch matrix and then cuBLAS was not measured either (same sweep);
  it cannot beat bf16 cuBLAS (it reads the integers, writes a bf16 copy that cuBLAS then reads:
  more bytes than bf16 alone), so the fused matmul is the path that can, once its grid fills the
  GPU. The probe's `tiles` stage times it, the tiles and the split, to decide.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from torchlet.contract import QuantizedTensor, fake_of, kernel_op

from ..v17_speculative_decoding import kernels

check, check_tensor = kernels.check, kernels.check_tensor

_NS = __name__.replace(".", "_")

MAGIC = tl.constexpr(0x4B000000)  # float32 bits of 2^23: OR-ing in an integer below 2^23 adds it
TWO23 = tl.constexpr(8388608.0)

# --- measured on the H200 (docs/probes/quantized_gpu_kernels.py, Qwen3-0.6B's matrices) ---
# Rows up to which the gemv runs. Step sums (28 layers + LM head, us per call, event-timed):
# int8 gemv 0.98 / 1.23 / 1.68 ms at 2 / 4 / 8 rows against the matmul's 1.68; int4_g64 1.04 /
# 1.40 / 2.06 against 1.92. The gemv grows with M (it re-runs the M loop per byte), the matmul
# does not; at 8 rows the matmul ties (int8) or wins (int4), at 4 it loses by 27-37%. 5-7 rows
# are interpolated (the probe's crossover stage now times 6); the split matmul may move it.
GEMV_MAX_M = 7
# gemv (BLOCK_N rows, {bits: BLOCK_K columns}, {bits: CHUNK columns a program walks at most})
# at one row, best of six plans per format: int8 reads 4 rows x 1,024 columns and splits K past
# 4,096 (0.836 ms a step against 0.909 for 512 / 2,048); int4 4 x 1,024 split past 2,048 (0.887
# int4_g64, 0.914 Q4_1, the best of the six). A matrix of many rows (the LM head) keeps every
# SM busy with 8-row programs: 49.8 / 65.3 / 70.2 us against 58.7 / 76.2 / 78.9 with 4.
GEMV_PLANS = {"few": (4, {8: 1024, 4: 1024}, {8: 4096, 4: 2048}),
              "many": (8, {8: 512, 4: 1024}, {8: 2048, 4: 2048})}
GEMV_MANY_ROWS = 16384
SUM_BLOCK = 1024
# matmul tiles by rows: (BLOCK_M, BLOCK_N, num_warps, num_stages). Swept on an H100 for int8
# (docs/probes/int8_matmul_tiles.py, a step's Qwen3-0.6B matrices): at 65-128 rows 128 x 64 tiles
# of 4 warps take 1.58 ms against 1.94 for 128 x 128 of 8; at 64 and 256 rows the plans here were
# the best of the module's tiles. Every int8 tile stays 1.2-1.6x bf16 cuBLAS at 64-256 rows.
MATMUL_TILES = ((32, (32, 64, 4, 4)), (64, (64, 64, 4, 4)), (128, (128, 64, 4, 4)),
                (1 << 62, (128, 128, 8, 3)))
# The matmul splits K when its tiles are fewer than SPLIT_BELOW x the SMs (down and o, at 1,024
# rows, made only 16 programs of 128 x 128), into chunks of at least MATMUL_MIN_CHUNK columns.
SPLIT_BELOW = 0.5
MATMUL_MIN_CHUNK = 512


def _slice_width(group: int, block_k: int) -> int:
    """GW: the largest power of two that divides the group (so a slice never straddles two
    groups) and is at most block_k."""
    return min(group & -group, block_k)


# --- gemv: a few rows, CUDA cores ----------------------------------------------------------

@triton.jit
def _gemv_kernel(x_ptr, q_ptr, s_ptr, z_ptr, mn_ptr, b_ptr, out_ptr, M, N, K, n_groups, chunk,
                 BITS: tl.constexpr, GROUP: tl.constexpr, GW: tl.constexpr,
                 HAS_Z: tl.constexpr, HAS_MIN: tl.constexpr, HAS_BIAS: tl.constexpr,
                 ONE_GROUP: tl.constexpr, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    NG: tl.constexpr = BLOCK_K // GW
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    lo = tl.program_id(1) * chunk
    hi = tl.minimum(lo + chunk, K)
    ms = tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    # 2^23 (+128: int8 is stored signed and shifted up) plus the zero point: what subtracting
    # from the magic float leaves q - zero. With one group it is per row, for the whole loop.
    base = TWO23 + (128.0 if BITS == 8 else 0.0)
    if ONE_GROUP and HAS_Z:
        row_off = base + tl.load(z_ptr + rows, mask=row_ok, other=0).to(tl.float32)[:, None, None]
    for k0 in range(lo, hi, BLOCK_K):
        sub = k0 + tl.arange(0, NG) * GW            # first column of each slice
        sub_ok = sub < hi                           # K is whole slices: slices are in or out
        wmask = row_ok[:, None, None] & sub_ok[None, :, None]
        if BITS == 8:
            t = tl.arange(0, GW)
            cols = sub[:, None] + t[None, :]                                   # [NG, GW]
            q = tl.load(q_ptr + rows[:, None, None] * K + cols[None, :, :], mask=wmask, other=0)
            qa = (q.to(tl.int32) + (MAGIC + 128)).to(tl.float32, bitcast=True)  # 2^23+128+q
        else:
            t = tl.arange(0, GW // 2)                 # a slice's bytes: GW/32 runs of 16
            nib = sub[:, None] // 2 + t[None, :]                               # [NG, GW/2]
            b = tl.load(q_ptr + rows[:, None, None] * (K // 2) + nib[None, :, :], mask=wmask,
                        other=0).to(tl.int32)
            qa = ((b & 0xF) | MAGIC).to(tl.float32, bitcast=True)              # low: 2^23+q
            qb = ((b >> 4) | MAGIC).to(tl.float32, bitcast=True)               # high nibbles
            cols = sub[:, None] + (t[None, :] // 16) * 32 + t[None, :] % 16    # low's columns
        if ONE_GROUP:
            if HAS_Z:
                off = row_off
            else:
                off = base
        else:
            gidx = rows[:, None] * n_groups + sub[None, :] // GROUP              # [BN, NG]
            gmask = row_ok[:, None] & sub_ok[None, :]
            scale = tl.load(s_ptr + gidx, mask=gmask, other=0.0).to(tl.float32)
            if HAS_Z:
                off = base + tl.load(z_ptr + gidx, mask=gmask, other=0).to(tl.float32)[:, :, None]
            else:
                off = base
            if HAS_MIN:
                mins = tl.load(mn_ptr + gidx, mask=gmask, other=0.0).to(tl.float32)
        wa = qa - off                                 # q - zero, exact
        if BITS == 4:
            wb = qb - off
        for m in tl.static_range(BLOCK_M):           # every weight byte serves all M rows
            # rows past M (BLOCK_M is a power of two) re-read the last row; never stored
            xrow = x_ptr + tl.minimum(m, M - 1) * K
            xmask = sub_ok[:, None]
            xa = tl.load(xrow + cols, mask=xmask, other=0.0).to(tl.float32)
            part = tl.sum(wa * xa[None, :, :], axis=2)                         # [BN, NG]
            if BITS == 4:
                xb = tl.load(xrow + cols + 16, mask=xmask, other=0.0).to(tl.float32)
                part += tl.sum(wb * xb[None, :, :], axis=2)
            if ONE_GROUP:
                got = tl.sum(part, axis=1)
            else:
                got = tl.sum(scale * part, axis=1)
                if HAS_MIN:
                    xs = tl.sum(xa, axis=1)
                    if BITS == 4:
                        xs += tl.sum(xb, axis=1)
                    got += tl.sum(mins * xs[None, :], axis=1)
            acc += tl.where(ms[None, :] == m, got[:, None], 0.0)
    if ONE_GROUP:  # the row's one scale, once (a split's partial sum scales the same way)
        acc *= tl.load(s_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)[:, None]
    out_mask = row_ok[:, None] & (ms[None, :] < M)
    if SPLIT > 1:  # a float32 partial sum: this split's [M, N] of the workspace
        tl.store(out_ptr + (tl.program_id(1) * M + ms[None, :]) * N + rows[:, None], acc,
                 mask=out_mask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)[:, None]
        tl.store(out_ptr + ms[None, :] * N + rows[:, None], acc.to(out_ptr.dtype.element_ty),
                 mask=out_mask)


@triton.jit
def _sum_splits_kernel(part_ptr, b_ptr, out_ptr, total, N, SPLIT: tl.constexpr,
                       HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)   # over the M * N outputs
    live = offs < total
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(SPLIT):  # always in the same order: the same sums every call
        acc += tl.load(part_ptr + split * total + offs, mask=live, other=0.0)
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs % N, mask=live, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=live)


def gemv_plan(m: int, n: int, k: int, bits: int, on_gpu: bool) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, split), from GEMV_PLANS. Under the interpreter, which runs programs
    one after another: a few large programs, and a K over 128 split so the specs see the
    split."""
    if not on_gpu:
        return min(triton.next_power_of_2(n), 64), 128, triton.cdiv(k, 128)
    block_n, block_k, chunk = GEMV_PLANS["many" if n >= GEMV_MANY_ROWS else "few"]
    return block_n, block_k[bits], triton.cdiv(k, chunk[bits])


@kernel_op(f"{_NS}::gemv")
def _gemv_op(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
             mins: torch.Tensor | None, bias: torch.Tensor | None, bits: int,
             group: int) -> torch.Tensor:
    m, k = x.shape
    n = q.shape[0]
    out = x.new_empty(m, n)
    if n == 0 or m == 0:
        return out
    block_n, block_k, split = gemv_plan(m, n, k, bits, x.is_cuda)
    chunk = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    split = triton.cdiv(k, chunk)
    one_group = group == k and mins is None
    part = out if split == 1 else torch.empty(split, m, n, device=x.device, dtype=torch.float32)
    _gemv_kernel[(triton.cdiv(n, block_n), split)](
        x, q, scales, zeros if zeros is not None else scales,
        mins if mins is not None else scales, bias if bias is not None else scales, part,
        m, n, k, k // group, chunk, BITS=bits, GROUP=group,
        GW=_slice_width(group, block_k), HAS_Z=zeros is not None, HAS_MIN=mins is not None,
        HAS_BIAS=bias is not None, ONE_GROUP=one_group, SPLIT=split,
        BLOCK_M=triton.next_power_of_2(m), BLOCK_N=block_n, BLOCK_K=block_k, num_warps=4)
    return summed(part, out, bias, scales, split)


def summed(part, out, bias, scales, split: int) -> torch.Tensor:
    """out: where K was split over programs, their float32 partial sums [split, M, N] added in
    a fixed order (and the bias) by one more launch; else the kernel wrote it already."""
    if split > 1:
        m, n = out.shape
        _sum_splits_kernel[(triton.cdiv(m * n, SUM_BLOCK),)](
            part, bias if bias is not None else scales, out, m * n, n, SPLIT=split,
            HAS_BIAS=bias is not None, BLOCK=SUM_BLOCK)
    return out


def shaped(x, q, scales, zeros, mins, bias, bits, group):
    """Both ops' shapes-only twin: a row of q's row count for each row of x, in x's dtype."""
    return x.new_empty(x.shape[0], q.shape[0])


fake_of(_gemv_op)(shaped)


# --- matmul: many rows, tensor cores -------------------------------------------------------

@triton.jit
def _matmul_kernel(x_ptr, q_ptr, s_ptr, z_ptr, mn_ptr, b_ptr, out_ptr, M, N, K, n_groups, chunk,
                   SPLIT: tl.constexpr, BITS: tl.constexpr, GROUP: tl.constexpr, GW: tl.constexpr,
                   HAS_Z: tl.constexpr, HAS_MIN: tl.constexpr, HAS_BIAS: tl.constexpr,
                   ONE_GROUP: tl.constexpr, IEEE: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    # pid 0 walks M fastest: the programs that read the same weight columns run side by side,
    # so a weight tile is fetched from memory about once and from L2 for the other row tiles.
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    dtype = x_ptr.dtype.element_ty
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    base = TWO23 + (128.0 if BITS == 8 else 0.0)
    if ONE_GROUP and HAS_Z:
        row_off = base + tl.load(z_ptr + rn, mask=n_ok, other=0).to(tl.float32)[:, None]
    W: tl.constexpr = GW if BITS == 8 else GW // 2   # columns (or bytes) a step loads
    t = tl.arange(0, W)
    if BITS == 8:
        xcols = t                                    # x's columns for the step's weights
    else:
        xcols = (t // 16) * 32 + t % 16              # the low nibbles' columns; high: +16
    lo = tl.program_id(2) * chunk                    # this program's share of K
    for k0 in range(lo, tl.minimum(lo + chunk, K), GW):  # a step: GW columns of one group
        if BITS == 8:
            qt = tl.load(q_ptr + rn[:, None] * K + k0 + t[None, :], mask=n_ok[:, None], other=0)
            qa = (qt.to(tl.int32) + (MAGIC + 128)).to(tl.float32, bitcast=True)
        else:
            bt = tl.load(q_ptr + rn[:, None] * (K // 2) + k0 // 2 + t[None, :],
                         mask=n_ok[:, None], other=0).to(tl.int32)
            qa = ((bt & 0xF) | MAGIC).to(tl.float32, bitcast=True)
            qb = ((bt >> 4) | MAGIC).to(tl.float32, bitcast=True)
        if ONE_GROUP:
            if HAS_Z:
                off = row_off
            else:
                off = base
        else:
            g = rn * n_groups + k0 // GROUP
            scale = tl.load(s_ptr + g, mask=n_ok, other=0.0).to(tl.float32)[:, None]
            if HAS_Z:
                off = base + tl.load(z_ptr + g, mask=n_ok, other=0).to(tl.float32)[:, None]
            else:
                off = base
            if HAS_MIN:
                mins = tl.load(mn_ptr + g, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        wa = qa - off
        if not ONE_GROUP:
            wa = wa * scale
            if HAS_MIN:
                wa += mins
        xa = tl.load(x_ptr + rm[:, None] * K + k0 + xcols[None, :], mask=m_ok[:, None],
                     other=0.0)
        if IEEE:
            acc += tl.dot(xa, tl.trans(wa.to(dtype)), input_precision="ieee")
        else:
            acc += tl.dot(xa, tl.trans(wa.to(dtype)))
        if BITS == 4:
            wb = qb - off
            if not ONE_GROUP:
                wb = wb * scale
                if HAS_MIN:
                    wb += mins
            xb = tl.load(x_ptr + rm[:, None] * K + k0 + 16 + xcols[None, :],
                         mask=m_ok[:, None], other=0.0)
            if IEEE:
                acc += tl.dot(xb, tl.trans(wb.to(dtype)), input_precision="ieee")
            else:
                acc += tl.dot(xb, tl.trans(wb.to(dtype)))
    if ONE_GROUP:  # the row's one scale, applied to the sum (q - z is exact in bf16: |q-z| < 256)
        acc *= tl.load(s_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    out_mask = m_ok[:, None] & n_ok[None, :]
    if SPLIT > 1:  # a float32 partial sum: this split's [M, N] of the workspace
        tl.store(out_ptr + (tl.program_id(2) * M + rm[:, None]) * N + rn[None, :], acc,
                 mask=out_mask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=out_mask)


def matmul_plan(m: int, on_gpu: bool) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages): by rows, from MATMUL_TILES. tl.dot needs 16 or
    more on every side on a GPU; the interpreter takes anything and runs a few large programs."""
    if not on_gpu:
        return max(16, triton.next_power_of_2(m)), 64, 4, 1
    for rows, tiles in MATMUL_TILES:
        if m <= rows:
            return tiles
    raise AssertionError("unreachable: the last tile covers any M")


_SMS: dict[int, int] = {}  # device index -> SMs (a driver call, asked at every launch)


def _sm_count(index: int) -> int:
    if index not in _SMS:
        _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SMS[index]


def matmul_split(tiles: int, k: int, gw: int, device: torch.device) -> int:
    """Programs K is split over: enough to give a grid of few tiles SMs to run on. Under the
    interpreter a K over 128 is split so the specs see the split."""
    if device.type != "cuda":
        return triton.cdiv(k, 128)
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    if tiles >= SPLIT_BELOW * sms:
        return 1
    return max(1, min(triton.cdiv(sms, tiles), k // max(MATMUL_MIN_CHUNK, gw)))


@kernel_op(f"{_NS}::matmul")
def _matmul_op(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor | None,
               mins: torch.Tensor | None, bias: torch.Tensor | None, bits: int,
               group: int) -> torch.Tensor:
    m, k = x.shape
    n = q.shape[0]
    out = x.new_empty(m, n)
    if n == 0 or m == 0:
        return out
    block_m, block_n, warps, stages = matmul_plan(m, x.is_cuda)
    one_group = group == k and mins is None
    # a step is one slice of one group; scaled after the dot with one group, so wider there
    gw = _slice_width(group, 128 if one_group else 64)
    check(gw // (2 if bits == 4 else 1) >= 16 and block_m >= 16 and block_n >= 16,
          "tl.dot needs 16 or more on every side")
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    split = matmul_split(tiles, k, gw, x.device)
    chunk = triton.cdiv(triton.cdiv(k, split), gw) * gw   # whole group slices
    split = triton.cdiv(k, chunk)
    part = out if split == 1 else torch.empty(split, m, n, device=x.device, dtype=torch.float32)
    _matmul_kernel[(triton.cdiv(m, block_m), triton.cdiv(n, block_n), split)](
        x, q, scales, zeros if zeros is not None else scales,
        mins if mins is not None else scales, bias if bias is not None else scales, part,
        m, n, k, k // group, chunk, SPLIT=split, BITS=bits, GROUP=group, GW=gw,
        HAS_Z=zeros is not None,
        HAS_MIN=mins is not None, HAS_BIAS=bias is not None, ONE_GROUP=one_group,
        IEEE=x.dtype == torch.float32, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps,
        num_stages=stages)
    return summed(part, out, bias, scales, split)


fake_of(_matmul_op)(shaped)


# --- the entry point -----------------------------------------------------------------------

def _checked(x: torch.Tensor, w: QuantizedTensor, bias: torch.Tensor | None) -> None:
    check_tensor("x", x)
    check(isinstance(w, QuantizedTensor), f"w must be a QuantizedTensor, got {type(w).__name__}")
    check(x.dim() == 2, f"x must be [M, K], got shape {tuple(x.shape)}")
    n, k = w.shape
    check(x.shape[1] == k, f"x has {x.shape[1]} columns but w is [{n}, {k}]")
    for part in w.parts():
        check(part.device == x.device, f"w's parts must be on {x.device}, got {part.device}")
        check(part.is_contiguous(), "w's parts must be contiguous")
    if bias is not None:
        check_tensor("bias", bias, like=x)
        check(bias.shape == (n,), f"bias must be [{n}], got {tuple(bias.shape)}")


def gemv(x: torch.Tensor, w: QuantizedTensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] @ w.T (+ bias) on CUDA cores, each weight byte read once for all M rows."""
    _checked(x, w, bias)
    return _gemv_op(x, w.q, w.scales, w.zeros, w.mins, bias, w.bits, w.group)


def matmul(x: torch.Tensor, w: QuantizedTensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] @ w.T (+ bias) on tensor cores, weights dequantized in registers."""
    _checked(x, w, bias)
    return _matmul_op(x, w.q, w.scales, w.zeros, w.mins, bias, w.bits, w.group)


def linear(x: torch.Tensor, w: QuantizedTensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] @ w.dequantize().T (+ bias [N]) -> [M, N] in x's dtype, float32 sums: gemv up
    to GEMV_MAX_M rows, matmul past it."""
    return (gemv if x.shape[0] <= GEMV_MAX_M else matmul)(x, w, bias)
