"""Can a Triton GEMM beat cuBLAS on a many-row decode step's products (issue 48)? At batch 256 x
1,024 an H100's step spends ~0.85 ms in cuBLAS's GEMMs (gate/up 0.27, down 0.24, q/k/v 0.13, o
0.10, LM head 0.12) where the weights' bytes take ~0.3 ms and their arithmetic ~0.35: the layers'
products, N = 896 or 1,152 wide, make few output tiles for 132 SMs (down's long K, 4,864, runs
unsplit on 64 x 32 tiles at 256 rows). Timed here, each product chained over 24 or more distinct
copies of its weights (128 MB or more in all, so nothing is read from L2 that a step would read
from memory), in one CUDA graph, us a call: cuBLAS (torch's mm; and through cuBLASLt, torch's other
BLAS back end) against a plain tiled Triton GEMM over a grid of tiles and split counts (float32
shares and a reduce launch when split), at Qwen2.5-0.5B's and Qwen3-0.6B's shapes and 131 (the
workload's average batch) and 256 rows. For gate/up also the product with SwiGLU in its epilogue
(each program sums a gate tile and the up tile of the same columns, and writes silu(gate) * up,
rounded as v13's swiglu_packed rounds it) against cuBLAS and swiglu_packed; for split plans also
the shares alone (a launch after could sum them as it reads them, as v13's sums-add-norm does
gemv's). Found on an H100 (docs/gpu.md, 2026-12-06, 20:30): cuBLAS faster at every product and row
count, 1.05-1.36x (the cuBLASLt column was added after that run).

`python3 docs/probes/gemm_many_rows.py [--qwen2.5-0.5b] [--qwen3-0.6b]` on a GPU (both models where
neither is named); `--check` on a CPU, under TRITON_INTERPRET=1, compares every plan's product with
torch's on tiny shapes."""
import itertools
import os
import sys

import torch
import triton
import triton.language as tl

from torchlet.bench.micro import chain_ms

SHAPES = {  # product: (N, K), the weight [N, K] as nn.Linear keeps it
    "qwen2.5-0.5b": {"q/k/v": (1152, 896), "o": (896, 896), "gate/up": (9728, 896),
                     "down": (896, 4864)},
    "qwen3-0.6b": {"q/k/v": (4096, 1024), "o": (1024, 2048), "gate/up": (6144, 1024),
                   "down": (1024, 3072)},
}
ROWS = (131, 256)
LAYERS = 24
# (BLOCK_M, BLOCK_N, BLOCK_K); each with splits 1 (bf16 out) and 2, 4, 8 (float32 shares).
TILES = list(itertools.product((64, 128), (32, 64, 128), (64, 128)))
SPLITS = (1, 2, 4, 8)


@triton.jit
def _gemm_kernel(a_ptr, w_ptr, out_ptr, M, N, K, k_share, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SHARES: tl.constexpr):
    # Programs that share a weight tile are neighbours (the row tiles of one column tile), so
    # the tile comes from memory once and from L2 after.
    tiles_m = tl.cdiv(M, BLOCK_M)
    pid = tl.program_id(0)
    pm, pn = pid % tiles_m, pid // tiles_m
    share = tl.program_id(1)
    rows = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    k_lo = share * k_share
    k_hi = tl.minimum(K, k_lo + k_share)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None].to(tl.int64) * K + ks[None, :],
                    mask=(rows[:, None] < M) & (ks[None, :] < k_hi), other=0.0)
        w = tl.load(w_ptr + cols[None, :].to(tl.int64) * K + ks[:, None],
                    mask=(cols[None, :] < N) & (ks[:, None] < k_hi), other=0.0)
        acc = tl.dot(a, w, acc)
    at = rows[:, None] * N + cols[None, :]
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    if SHARES:
        tl.store(out_ptr + share.to(tl.int64) * M * N + at, acc, mask=mask)
    else:
        tl.store(out_ptr + at, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gemm_swiglu_kernel(a_ptr, w_ptr, out_ptr, M, WIDTH, K, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # w is [gate | up], [2 * WIDTH, K]: a program sums columns c of gate and of up together.
    tiles_m = tl.cdiv(M, BLOCK_M)
    pid = tl.program_id(0)
    pm, pn = pid % tiles_m, pid // tiles_m
    rows = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    gate = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None].to(tl.int64) * K + ks[None, :],
                    mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        w_at = w_ptr + cols[None, :].to(tl.int64) * K + ks[:, None]
        w_mask = (cols[None, :] < WIDTH) & (ks[:, None] < K)
        gate = tl.dot(a, tl.load(w_at, mask=w_mask, other=0.0), gate)
        up = tl.dot(a, tl.load(w_at + WIDTH * K, mask=w_mask, other=0.0), up)
    dtype = out_ptr.dtype.element_ty
    g = gate.to(dtype).to(tl.float32)
    silu = (g * tl.sigmoid(g)).to(dtype)
    out = (silu.to(tl.float32) * up.to(dtype).to(tl.float32)).to(dtype)
    tl.store(out_ptr + rows[:, None] * WIDTH + cols[None, :], out,
             mask=(rows[:, None] < M) & (cols[None, :] < WIDTH))


def triton_swiglu_linear(a, w, tile, out=None):
    """silu(gate) * up of a [M, K] @ w[2 * WIDTH, K].T's two halves, in one launch."""
    (m, k), width = a.shape, w.shape[0] // 2
    bm, bn, bk = tile
    out = torch.empty(m, width, device=a.device, dtype=a.dtype) if out is None else out
    _gemm_swiglu_kernel[(triton.cdiv(m, bm) * triton.cdiv(width, bn),)](
        a, w, out, m, width, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=4,
        num_stages=3 if bk == 128 else 4)
    return out


def swiglu(gate_up):
    gate, up = gate_up.chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate.float()).to(gate.dtype).float() * up.float()).to(
        gate.dtype)


@triton.jit
def _reduce_kernel(shares_ptr, out_ptr, n, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for s in tl.static_range(SPLITS):
        acc += tl.load(shares_ptr + s * n + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=offs < n)


def triton_linear(a, w, tile, splits, out=None, shares=None, reduce=True):
    """a [M, K] @ w[N, K].T with one plan: `splits` shares of K, reduced by a second launch."""
    (m, k), n = a.shape, w.shape[0]
    bm, bn, bk = tile
    out = torch.empty(m, n, device=a.device, dtype=a.dtype) if out is None else out
    k_share = triton.cdiv(triton.cdiv(k, splits), bk) * bk
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), splits)
    stages = 3 if bk == 128 else 4
    if splits == 1:
        _gemm_kernel[grid](a, w, out, m, n, k, k_share, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                           SHARES=False, num_warps=4, num_stages=stages)
        return out
    if shares is None:
        shares = torch.empty(splits, m, n, device=a.device, dtype=torch.float32)
    _gemm_kernel[grid](a, w, shares, m, n, k, k_share, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                       SHARES=True, num_warps=4, num_stages=stages)
    if not reduce:
        return shares
    _reduce_kernel[(triton.cdiv(m * n, 1024),)](shares, out, m * n, SPLITS=splits, BLOCK=1024)
    return out


def chained_us(calls):
    """The calls (one a layer, each its own weights) captured in one CUDA graph: us a call."""
    turn = itertools.cycle(calls)
    return chain_ms(lambda: next(turn)(), len(calls)) * 1e3


def main():
    device, dtype = "cuda", torch.bfloat16
    print(torch.cuda.get_device_name(), "| us a call, 24 layers' weights chained in a graph",
          flush=True)
    models = [m for m in SHAPES if f"--{m}" in sys.argv] or list(SHAPES)
    for model, products in ((m, SHAPES[m]) for m in models):
        for (name, (n, k)), m in itertools.product(products.items(), ROWS):
            # at least 24 layers' copies, and over twice an H100's L2 (50 MB) of them in all, so
            # that no replay finds a weight in L2 from the replay before (as in a step)
            copies = max(LAYERS, -(-128_000_000 // (n * k * 2)))
            ws = [torch.randn(n, k, device=device, dtype=dtype) * k ** -0.5
                  for _ in range(copies)]
            a = torch.randn(m, k, device=device, dtype=dtype)
            out = torch.empty(m, n, device=device, dtype=dtype)
            want = torch.nn.functional.linear(a, ws[0])
            cublas = chained_us([lambda w=w: torch.mm(a, w.t(), out=out) for w in ws])
            # the same product through cuBLASLt's heuristics (torch's other BLAS back end)
            before = torch.backends.cuda.preferred_blas_library("cublaslt")
            lt = chained_us([lambda w=w: torch.mm(a, w.t(), out=out) for w in ws])
            torch.backends.cuda.preferred_blas_library(before)
            shares = torch.empty(max(SPLITS), m, n, device=device, dtype=torch.float32)
            plans = []
            for tile, splits in itertools.product(TILES, SPLITS):
                if splits > 1 and triton.cdiv(k, splits) < tile[2]:
                    continue
                got = triton_linear(a, ws[0], tile, splits, out, shares[:splits])
                err = (got.float() - want.float()).abs().max().item()
                assert err < 0.05, (model, name, m, tile, splits, err)
                us = chained_us([lambda w=w: triton_linear(a, w, tile, splits, out,
                                                           shares[:splits]) for w in ws])
                plans.append((us, tile, splits))
            plans.sort()
            mb = n * k * 2 / 1e6
            best = ", ".join(f"{us:.2f} {t[0]}x{t[1]}x{t[2]}/{s}" for us, t, s in plans[:3])
            print(f"{model} {name:8s} {m:3d} rows ({mb:5.1f} MB): cuBLAS {cublas:6.2f} "
                  f"(cuBLASLt {lt:6.2f}) | "
                  f"Triton best {plans[0][0] / cublas:.2f}x: {best}", flush=True)
            split = [p for p in plans if p[2] > 1][:3]
            alone = [(chained_us([lambda w=w: triton_linear(a, w, t, s, out, shares[:s], False)
                                  for w in ws]), t, s) for _, t, s in split]
            print("    split plans' shares alone: " + ", ".join(
                f"{us:.2f} {t[0]}x{t[1]}x{t[2]}/{s}" for us, t, s in alone), flush=True)
            if name == "gate/up":
                fused_case(a, ws, cublas)
            del ws


def fused_case(a, ws, cublas_us):
    """gate/up then SwiGLU: cuBLAS and v13's swiglu_packed, against one Triton launch."""
    import implementations
    packed = implementations.load("v13_fused").package.fused_kernels.swiglu_packed
    m, width = a.shape[0], ws[0].shape[0] // 2
    gate_up = torch.empty(m, 2 * width, device=a.device, dtype=a.dtype)
    want = swiglu(torch.nn.functional.linear(a, ws[0]))
    chain = chained_us([lambda w=w: packed(torch.mm(a, w.t(), out=gate_up)) for w in ws])
    out = torch.empty(m, width, device=a.device, dtype=a.dtype)
    cells = []
    for tile in [(64, 32, 64), (64, 64, 64), (64, 64, 128), (128, 32, 64), (128, 64, 64),
                 (64, 32, 128)]:
        err = (triton_swiglu_linear(a, ws[0], tile, out).float() - want.float()).abs().max()
        assert err < 0.05, (tile, err.item())
        cells.append((chained_us([lambda w=w: triton_swiglu_linear(a, w, tile, out)
                                  for w in ws]), tile))
    cells.sort()
    print(f"    gate/up + SwiGLU: cuBLAS + swiglu_packed {chain:.2f} (GEMM alone "
          f"{cublas_us:.2f}) | one launch: " + ", ".join(
              f"{us:.2f} {t[0]}x{t[1]}x{t[2]}" for us, t in cells[:3]), flush=True)


def check():
    """Every plan against torch's product on tiny shapes (the CPU, the interpreter)."""
    torch.manual_seed(0)
    for (m, n, k), tile, splits in itertools.product(((5, 40, 200), (70, 33, 130)),
                                                      [(64, 32, 64), (64, 64, 128)], SPLITS):
        a, w = torch.randn(m, k), torch.randn(n, k)
        got = triton_linear(a, w, tile, splits)
        torch.testing.assert_close(got, a @ w.t(), rtol=1e-4, atol=1e-4)
    for m, width, k in ((5, 40, 200), (70, 33, 130)):
        a, w = torch.randn(m, k), torch.randn(2 * width, k)
        got = triton_swiglu_linear(a, w, (64, 32, 64))
        torch.testing.assert_close(got, swiglu(a @ w.t()), rtol=1e-4, atol=1e-4)
    print("every plan equals torch's product")


if __name__ == "__main__":
    if "--check" in sys.argv:
        assert os.environ.get("TRITON_INTERPRET") == "1", "run --check with TRITON_INTERPRET=1"
        check()
    else:
        main()
