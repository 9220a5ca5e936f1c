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
import sys

import torch

import implementations
from torchlet.bench.micro import chain_ms, graphed, time_ms

paged = implementations.load("v10_triton_paged_gqa").package.paged_kernels
device, dtype = "cuda", torch.bfloat16
KV_HEADS, GROUP, HEAD_DIM, PAGE = 2, 7, 64, 16
CASES = [(256, 1024), (131, 903), (64, 4096), (1, 4096)]
BANDWIDTH = float(sys.argv[sys.argv.index("--bandwidth") + 1]) if "--bandwidth" in sys.argv \
    else 3.35e12


def case(batch: int, context: int):
    g = torch.Generator(device=device).manual_seed(batch * 7919 + context)
    pages = -(-context // PAGE)
    shape = (batch * pages + 1, PAGE, KV_HEADS, HEAD_DIM)
    k = torch.randn(shape, generator=g, device=device).to(dtype)
    v = torch.randn(shape, generator=g, device=device).to(dtype)
    order = torch.randperm(batch * pages, generator=torch.Generator().manual_seed(0)) + 1
    tables = order.view(batch, pages).to(device=device, dtype=torch.int32)
    lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    q = torch.randn(batch, KV_HEADS * GROUP, HEAD_DIM, generator=g, device=device).to(dtype)
    return q, k, v, tables, lens


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


def layers(batch: int, context: int, n: int = 24):
    """us a call chained over n calls of one cache, then over n caches (one each)."""
    scale = HEAD_DIM ** -0.5
    q, k, v, tables, lens = case(batch, context)
    caches = [(k, v)] + [(torch.randn_like(k), torch.randn_like(v)) for _ in range(n - 1)]
    for label, pick in (("one cache", lambda i: caches[0]), (f"{n} caches", lambda i: caches[i])):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(n):
                paged._paged_decode_op(q, *pick(i), tables, lens, scale, 0, False)
        graph.replay()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        us = start.elapsed_time(end) * 1e3 / (5 * n)
        moved = batch * context * 2 * KV_HEADS * HEAD_DIM * 2
        print(f"{batch:4d} x {context:5d} chained over {label:10s} {us:6.1f} us  "
              f"{100 * moved / (us * 1e-6) / BANDWIDTH:3.0f}%", flush=True)


def chained_us(calls, replays: int = 5) -> float:
    """us a replay of one graph of these calls, one after another."""
    for call in calls:  # cuBLAS makes its handle, Triton compiles: outside the capture
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / replays


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
