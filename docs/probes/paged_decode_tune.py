"""v10's paged decode attention, the real op (its split planning included), timed inside a CUDA
graph of 20 calls under BLOCK_N and warp variants (module constants patched for the probe):
bf16, GQA 14:2, head_dim 64, pages of 16 tokens in random order."""
import torch

import implementations
from torchlet.bench.micro import chain_ms

paged = implementations.load("v10_triton_paged_gqa").package.paged_kernels
device, dtype = "cuda", torch.bfloat16
CASES = [(1, 1024), (1, 4096), (64, 1024), (64, 4096), (256, 1024), (256, 128)]


def case(batch, context, block=16, kv_heads=2, group=7, head_dim=64):
    pages = -(-context // block)
    k = torch.randn(batch * pages + 1, block, kv_heads, head_dim, device=device, dtype=dtype)
    tables = (torch.randperm(batch * pages, device=device) + 1).view(batch, pages).int()
    lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    q = torch.randn(batch, kv_heads * group, head_dim, device=device, dtype=dtype)
    return q, k, torch.randn_like(k), tables, lens


def graph_us(fn, n=20):
    """fn's us a call in a CUDA graph of n calls (the bench's own chained timing)."""
    fn()
    torch.cuda.synchronize()
    return chain_ms(fn, n, replays=1) * 1e3


def main():
    inputs = {c: case(*c) for c in CASES}
    run = paged._paged_decode_kernel.run
    for block_n, warps in [(64, 4), (128, 4), (128, 8), (256, 4), (256, 8)]:
        paged.BLOCK_N = block_n
        paged._paged_decode_kernel.run = lambda *a, w=warps, **k: run(*a, **{"num_warps": w, **k})
        cells = []
        for batch, context in CASES:
            q, k, v, tables, lens = inputs[batch, context]
            us = graph_us(lambda: paged.paged_decode_attention(q, k, v, tables, lens, 0.125))
            share = batch * context * 2 * 2 * 64 * 2 / (us * 1e-6) / 4.3e12 * 100
            cells.append(f"B{batch} x {context}: {us:.1f} us ({share:.0f}%)")
        print(f"BLOCK_N {block_n}, {warps} warps | " + " | ".join(cells))


if __name__ == "__main__":
    main()
