"""v18's int8 matmul (the tensor-core path past GEMV_MAX_M rows) against bf16 cuBLAS at the
nano-vllm workload's batch sizes (64, 128, 256 rows), on Qwen3-0.6B's matrices: the module's own
plans, its kernel under other tiles, and a second kernel written for int8 per channel alone
(weights loaded K-major as [BLOCK_K, BLOCK_N] and cast straight to bf16, exact for |q| <= 127,
the row's scale applied once to the float32 sum; K split over programs with float32 atomics
when the tiles are few). GPU only. Timing as quantized_gpu_kernels.py: event pairs, a sleep
first, each call on its own copy of the weights; step = sum of a matrix's median x layers.

    PYTHONPATH=. python docs/probes/int8_matmul_tiles.py
"""
from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, "docs/probes")
from quantized_gpu_kernels import (DEV, DTYPE, copies_of, median_us, quantized,  # noqa: E402
                                   shapes_of)

from implementations.v18_quantized_weights import gpu_kernels as gk  # noqa: E402

MODEL = "Qwen3-0.6B"
ROWS = (64, 128, 256)


@triton.jit
def _mm8_kernel(x_ptr, q_ptr, s_ptr, out_ptr, M, N, K, chunk, SPLIT: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    lo = tl.program_id(2) * chunk
    for k0 in range(lo, tl.minimum(lo + chunk, K), BLOCK_K):
        xa = tl.load(x_ptr + rm[:, None] * K + k0 + rk[None, :], mask=m_ok[:, None], other=0.0)
        w = tl.load(q_ptr + rn[None, :] * K + k0 + rk[:, None], mask=n_ok[None, :], other=0)
        acc += tl.dot(xa, w.to(x_ptr.dtype.element_ty))
    acc *= tl.load(s_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    mask = m_ok[:, None] & n_ok[None, :]
    if SPLIT > 1:
        tl.atomic_add(out_ptr + rm[:, None] * N + rn[None, :], acc, mask=mask, sem="relaxed")
    else:
        tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc.to(out_ptr.dtype.element_ty),
                 mask=mask)


@triton.jit
def _mm8t_kernel(x_ptr, q_ptr, s_ptr, out_ptr, M, N, K, chunk, SPLIT: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    # out^T = W @ x^T: the weights, cast in registers, are the dot's first operand (on Hopper
    # a wgmma reads that one from registers; the second, x, from shared memory)
    rn = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    m_ok, n_ok = rm < M, rn < N
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    lo = tl.program_id(2) * chunk
    for k0 in range(lo, tl.minimum(lo + chunk, K), BLOCK_K):
        w = tl.load(q_ptr + rn[:, None] * K + k0 + rk[None, :], mask=n_ok[:, None], other=0)
        xt = tl.load(x_ptr + rm[None, :] * K + k0 + rk[:, None], mask=m_ok[None, :], other=0.0)
        acc += tl.dot(w.to(x_ptr.dtype.element_ty), xt)
    acc *= tl.load(s_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[:, None]
    mask = n_ok[:, None] & m_ok[None, :]
    if SPLIT > 1:
        tl.atomic_add(out_ptr + rm[None, :] * N + rn[:, None], acc, mask=mask, sem="relaxed")
    else:
        tl.store(out_ptr + rm[None, :] * N + rn[:, None], acc.to(out_ptr.dtype.element_ty),
                 mask=mask)


def launcher(kernel, weights_first: bool, tiles, split_below):
    """fn(x, w) running one of the two kernels with these tiles; K split over programs, summed
    by float32 atomics, where the tiles are fewer than split_below x the SMs."""
    if weights_first:
        bn, bm, bk, warps, stages = tiles
    else:
        bm, bn, bk, warps, stages = tiles

    def fn(x, w):
        m, k = x.shape
        n = w.q.shape[0]
        grid_mn = triton.cdiv(m, bm) * triton.cdiv(n, bn)
        split = 1
        if grid_mn < split_below * gk._sm_count(0):
            split = max(1, min(triton.cdiv(gk._sm_count(0), grid_mn), k // 512))
        chunk = triton.cdiv(triton.cdiv(k, split), bk) * bk
        split = triton.cdiv(k, chunk)
        out = (torch.zeros(m, n, device=x.device, dtype=torch.float32) if split > 1
               else x.new_empty(m, n))
        grid = (triton.cdiv(n, bn), triton.cdiv(m, bm)) if weights_first else \
            (triton.cdiv(m, bm), triton.cdiv(n, bn))
        blocks = ({"BLOCK_N": bn, "BLOCK_M": bm} if weights_first
                  else {"BLOCK_M": bm, "BLOCK_N": bn})
        kernel[(*grid, split)](x, w.q, w.scales, out, m, n, k, chunk, SPLIT=split, **blocks,
                               BLOCK_K=bk, num_warps=warps, num_stages=stages)
        return out.to(x.dtype) if split > 1 else out
    return fn


def mm8t(tiles, split_below):
    return launcher(_mm8t_kernel, True, tiles, split_below)


def mm8(tiles, split_below):
    return launcher(_mm8_kernel, False, tiles, split_below)


def gk_tiles(t, split_below):
    def fn(x, w):
        saved = gk.MATMUL_TILES, gk.SPLIT_BELOW
        gk.MATMUL_TILES, gk.SPLIT_BELOW = ((1 << 62, t),), split_below
        try:
            return gk.matmul(x, w)
        finally:
            gk.MATMUL_TILES, gk.SPLIT_BELOW = saved
    return fn


def variants():
    """The best of the first sweep (H100, 2026-12-05) and the weights-first kernel's tiles."""
    v = {"gk own plans": gk.matmul}
    for t in [(64, 64, 4, 4), (128, 64, 4, 4)]:
        v[f"gk BM{t[0]} BN{t[1]} w{t[2]} s{t[3]}"] = gk_tiles(t, 0.5)
    for t in [(64, 64, 128, 4, 4), (64, 128, 64, 4, 5), (128, 128, 64, 8, 4)]:
        v[f"mm8 BM{t[0]} BN{t[1]} BK{t[2]} w{t[3]} s{t[4]} split<0.6"] = mm8(t, 0.6)
    for t in [(64, 64, 128, 4, 4), (64, 128, 128, 4, 4), (128, 128, 64, 8, 3),
              (64, 256, 64, 8, 3), (128, 256, 64, 8, 3), (128, 64, 128, 4, 4),
              (64, 128, 64, 4, 5)]:
        for sb in (0.0, 0.6):
            v[f"mm8t BN{t[0]} BM{t[1]} BK{t[2]} w{t[3]} s{t[4]} split<{sb}"] = mm8t(t, sb)
    return v


def main():
    gen = torch.Generator(device=DEV).manual_seed(0)
    begin = time.time()
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    times: dict[str, dict[str, float]] = {}
    fns = variants()
    for name, n, k, per in shapes_of(MODEL):
        bf = copies_of(lambda: torch.randn(n, k, device=DEV, generator=gen, dtype=DTYPE) * 0.02,
                       n * k * 2)
        qs = copies_of(lambda: quantized("int8", n, k, gen), n * k)
        for m in ROWS:
            x = torch.randn(m, k, device=DEV, generator=gen, dtype=DTYPE)
            ref = x.double() @ qs[0].dequantize().double().T  # once a shape: fp64 is slow
            times.setdefault(f"bf16 cuBLAS|{m}", {})[name] = median_us(F.linear,
                                                                       [(x, w) for w in bf])
            for vname, fn in fns.items():
                try:
                    err = ((fn(x, qs[0]).double() - ref).norm() / ref.norm()).item()
                    assert err < 1e-2, err
                    t = median_us(fn, [(x, w) for w in qs])
                except Exception as e:  # noqa: BLE001
                    print(f"  {vname} {name} M={m}: {type(e).__name__} {e}"[:240], flush=True)
                    t = float("nan")
                times.setdefault(f"{vname}|{m}", {})[name] = t
        del bf, qs
        torch.cuda.empty_cache()
        print(f"[{name} done at {time.time() - begin:.0f} s]", flush=True)
    print(f"\n== int8, {MODEL}: step ms (sum of medians x layers), then us per matrix ==")
    for m in ROWS:
        rows = [(key, sum(t[s] * p for s, _, _, p in shapes_of(MODEL)) / 1e3)
                for key, t in times.items() if key.endswith(f"|{m}")]
        for key, ms in sorted(rows, key=lambda r: r[1]):
            print(f"  M={m:<3d} {key.split('|')[0]:44s} {ms:7.4f}  " +
                  " ".join(f"{s}:{v:6.1f}" for s, v in times[key].items()), flush=True)


if __name__ == "__main__":
    main()
