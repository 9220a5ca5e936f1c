"""Does the paged cache's layout limit v10's decode attention at Qwen2.5-0.5B's heads? The cache
is [blocks, page, kv_heads, head_dim] (v08's): a token's K is one row of every KV head, and at
2 KV heads of 64 a program (one request x one KV head) reads 128-byte halves of 256-byte rows,
16 of them strided through a page. Qwen3-0.6B's programs read 256-byte parts of 2 KB rows and
reach ~95% of an H100's bandwidth; Qwen2.5-0.5B's reach ~62% one call a replay and ~76% chained
(docs/perf-notes.md). Here the same kernel reads the same values from a head-major cache,
[blocks, kv_heads, page, head_dim] (a KV head's page one run of page x head_dim values), handed
to it as a permuted view: its strides say where each token and head lives, so nothing else
changes. The outputs must be the same bits.

Prints, for each case (batch x context, pages of 16 in random order) and layout: us one call a
replay (L2 flushed, as bench kernel) and chained (20 calls in a graph), % of --bandwidth
(default an H100's 3.35e12), and the largest difference from the token-major output. Then,
token-major, the chain of 24 calls each over its own caches (as a step's 24 layers read 24
caches) against 24 calls over one: what moving from one cache to the next costs; and the
chain of 24 [gate/up's GEMM at those rows, the attention] against the 24 GEMMs and the 24
attentions each chained alone: what a layer's products before it cost the attention. GPU only.

    PYTHONPATH=. python3 docs/probes/kv_layout.py [--bandwidth B]
"""
import os
import sys

import torch

from torchlet.bench.micro import chain_ms, graphed, time_ms

sys.path.insert(0, os.path.dirname(__file__))
# the same cases as the pairs probe: its shape, inputs and v10's kernel module
from paged_decode_pairs import HEAD_DIM, KV_HEADS, case, device, dtype, paged  # noqa: E402

CASES = [(256, 1024), (131, 903), (64, 4096), (1, 4096)]
BANDWIDTH = float(sys.argv[sys.argv.index("--bandwidth") + 1]) if "--bandwidth" in sys.argv \
    else 3.35e12


def head_major(cache: torch.Tensor) -> torch.Tensor:
    """The same values stored [blocks, kv_heads, page, head_dim], seen as [blocks, page,
    kv_heads, head_dim] (a view whose strides say so)."""
    return cache.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)


def main():
    scale = HEAD_DIM ** -0.5
    print(torch.cuda.get_device_name(), "| us one call / chained, % of", BANDWIDTH / 1e12,
          "TB/s", flush=True)
    for batch, context in CASES:
        q, k, v, tables, lens = case(batch, context)
        layouts = {"token-major": (k, v), "head-major": (head_major(k), head_major(v))}
        del k, v
        want = None
        for name, (kc, vc) in layouts.items():
            # v10's op itself (its checks want a contiguous cache): the kernel reads by strides
            call = lambda kc=kc, vc=vc: paged._paged_decode_op(q, kc, vc, tables, lens, scale,
                                                                0, False)
            out = call()
            want = out if want is None else want
            diff = (out.float() - want.float()).abs().max().item()
            (replay,), _ = graphed([call], device)
            one = time_ms(replay, device, 50) * 1e3
            chained = chain_ms(call, 20) * 1e3
            moved = batch * context * 2 * KV_HEADS * HEAD_DIM * 2
            print(f"{batch:4d} x {context:5d} {name:12s} {one:6.1f} / {chained:6.1f} us  "
                  f"{100 * moved / (one * 1e-6) / BANDWIDTH:3.0f} / "
                  f"{100 * moved / (chained * 1e-6) / BANDWIDTH:3.0f}%  diff {diff:.0e}",
                  flush=True)


def chained_us(calls) -> float:
    """us a replay of one graph of these calls, one after another (bench's chain_ms over the
    list)."""
    for call in calls:  # cuBLAS makes its handle, Triton compiles: outside the capture
        call()
    torch.cuda.synchronize()
    return chain_ms(lambda: [call() for call in calls], 1) * 1e3


def layers(batch: int, context: int, n: int = 24):
    """us a call chained over n calls of one cache, then over n caches (one each)."""
    scale = HEAD_DIM ** -0.5
    q, k, v, tables, lens = case(batch, context)
    caches = [(k, v)] + [(torch.randn_like(k), torch.randn_like(v)) for _ in range(n - 1)]
    for label, pick in (("one cache", lambda i: caches[0]), (f"{n} caches", lambda i: caches[i])):
        us = chained_us([lambda c=pick(i): paged._paged_decode_op(q, *c, tables, lens, scale, 0,
                                                                   False) for i in range(n)]) / n
        moved = batch * context * 2 * KV_HEADS * HEAD_DIM * 2
        print(f"{batch:4d} x {context:5d} chained over {label:10s} {us:6.1f} us  "
              f"{100 * moved / (us * 1e-6) / BANDWIDTH:3.0f}%", flush=True)


def interleaved(batch: int, context: int, n: int = 24):
    """24 layers' [gate/up GEMM, attention] against each alone, chained, us a layer."""
    scale = HEAD_DIM ** -0.5
    q, k, v, tables, lens = case(batch, context)
    x = torch.randn(batch, 896, device=device, dtype=dtype)
    weights = [torch.randn(9728, 896, device=device, dtype=dtype) * 0.03 for _ in range(n)]
    gemm = [lambda w=w: torch.nn.functional.linear(x, w) for w in weights]
    attend = [lambda: paged._paged_decode_op(q, k, v, tables, lens, scale, 0, False)] * n
    both = [c for pair in zip(gemm, attend) for c in pair]
    alone_g, alone_a, mixed = chained_us(gemm) / n, chained_us(attend) / n, chained_us(both) / n
    print(f"{batch:4d} x {context:5d} a layer: GEMM alone {alone_g:5.1f} us + attention alone "
          f"{alone_a:5.1f} = {alone_g + alone_a:5.1f}; interleaved {mixed:5.1f} us", flush=True)


if __name__ == "__main__":
    if "--layers-only" not in sys.argv:
        main()
    layers(256, 1024)
    layers(131, 903)
    interleaved(256, 1024)
    interleaved(131, 903)
