"""Would a batch-1 layer run faster with its weights already in L2 (issue 48's moonshot, 0.45 ms
a batch-1 step)? A one-row layer reads 29.7 MB of weights in four launches (q/k/v, o, gate/up,
down) and takes ~24.6 us on an H100 where its bytes take ~9 at 3.35 TB/s: each launch's programs
load their weights only once they are resident, and a launch's programs become resident only as
the launch before leaves the SMs. Timed here, us a layer of dependent_chain.py's chain (24
layers of the real v13 one-row ops, 128 tokens of context, the dependent launch on), five ways:

- `distinct`: each layer its own weights, as a step reads them (the baseline);
- `shared`: every layer the same weights (29.7 MB, under the 50 MB of L2): after the first layer
  every weight read is an L2 hit, the floor a perfect prefetch could reach;
- `side`: distinct, and at the start of each layer a prefetch launch on a second stream asks L2
  for this layer's gate/up and down and the next layer's q/k/v and o
  (`cp.async.bulk.prefetch.L2`, one instruction per 64 KB chunk: no SM holds the bytes);
- `chained`: the same prefetch launch in the chain itself, after the q/k/v launch, launched
  dependent (it waits for that launch at its end, so the launch after it still follows q/k/v's
  writes);
- `side-mlp`: as `side`, only this layer's gate/up and down.

GPU only (Hopper: the bulk prefetch is sm_90's). Found on an H100 (docs/gpu.md, 2026-12-07
11:51; twice, alternated): distinct 21.84 / 21.95 us a layer, shared 18.69 / 18.93, side 23.77 /
23.92, chained 24.76 / 24.43, side-mlp 23.66 / 23.63, every prefetching chain's output the
bits of distinct's. Weights all in L2 would save ~3 us of a layer's ~22 (14%): the chain is
bound by its launches' hand-overs, not by memory; asking L2 ahead cost more than it saved.

    PYTHONPATH=. python3 docs/probes/l2_prefetch.py
"""
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).parent))
from dependent_chain import LAYERS, chain, gemv, graph_us, paged, step_inputs  # noqa: E402
from dependent_chain import HEAD_DIM, HIDDEN, N_KV, N_Q  # noqa: E402

CHUNK = 64 * 1024  # bytes a prefetch instruction asks for

# One thread of the program asks L2 for `size` bytes from `addr`; the output is a dummy (an asm
# with side effects must give one).
_ASM = tl.constexpr("""{
 .reg .pred p; .reg .u32 t;
 mov.u32 t, %tid.x;
 setp.eq.u32 p, t, 0;
 @p cp.async.bulk.prefetch.L2.global [$1], $2;
 mov.u32 $0, 0;
}""")


@triton.jit
def _prefetch_kernel(addr_ptr, size_ptr, CHUNK: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    base = tl.load(addr_ptr + tl.program_id(0))
    size = tl.load(size_ptr + tl.program_id(0))
    off = tl.program_id(1).to(tl.int64) * CHUNK
    if off < size:
        n = tl.minimum(size - off, CHUNK).to(tl.int32)
        tl.inline_asm_elementwise(_ASM, "=r,l,r", [tl.full([1], 0, tl.int64) + base + off,
                                                   tl.full([1], 0, tl.int32) + n],
                                  dtype=tl.int32, is_pure=False, pack=1)
    if PDL:  # keep the chain's order: done only once the launch before is
        tl.extra.cuda.gdc_wait()


class Prefetch:
    """A launch that asks L2 for some tensors' bytes, their addresses held on the device."""

    def __init__(self, tensors):
        self.addr = torch.tensor([t.data_ptr() for t in tensors], device="cuda",
                                 dtype=torch.int64)
        sizes = [t.numel() * t.element_size() for t in tensors]
        self.size = torch.tensor(sizes, device="cuda", dtype=torch.int64)
        self.grid = (len(tensors), triton.cdiv(max(sizes), CHUNK))

    def __call__(self, dependent: bool):
        opts = paged.dependent_launch(dependent)
        _prefetch_kernel[self.grid](self.addr, self.size, CHUNK=CHUNK, num_warps=1, **opts)


def prefetch_chain(layers, h, res, cos, sin, lens, slot, side, mode):
    """dependent_chain.chain with a prefetch launch a layer (mode side, chained or side-mlp)."""
    side_stream, main = side, torch.cuda.current_stream()  # the capture's stream
    for w in layers:
        if mode == "side":
            fetch = w["_fetch_all"]
        elif mode == "side-mlp":
            fetch = w["_fetch_mlp"]
        if mode in ("side", "side-mlp"):
            side_stream.wait_stream(main)
            with torch.cuda.stream(side_stream):
                fetch(False)
        q, _, _ = gemv.gemv_rope_split(h, w["qkv"], w["qkv_b"], cos, sin, N_Q, N_KV,
                                       (w["k_cache"], w["v_cache"], slot))
        if mode == "chained":
            w["_fetch_all"](True)
        out = gemv.dependent_decode_attention(q, w["k_cache"], w["v_cache"], w["table"], lens,
                                              HEAD_DIM ** -0.5)
        o = gemv.gemv(out.reshape(1, HIDDEN), w["o"])
        gu, res = gemv.norm_gemv(o, res, w["norm1"], 1e-6, w["gate_up"])
        h, res = gemv.pending_add_norm(gu, w["down"], None, res, w["norm2"], 1e-6, swiglu=True)
    if mode in ("side", "side-mlp"):
        main.wait_stream(side_stream)
    return gemv.settle(h)


def main():
    torch.manual_seed(0)
    inputs = step_inputs(128)
    layers = inputs[0]
    for i, w in enumerate(layers):
        nxt = layers[(i + 1) % len(layers)]
        w["_fetch_all"] = Prefetch([w["gate_up"], w["down"], nxt["qkv"], nxt["o"]])
        w["_fetch_mlp"] = Prefetch([w["gate_up"], w["down"]])
    shared = ([layers[0]] * LAYERS,) + inputs[1:]
    side = torch.cuda.Stream()
    cases = [("distinct", lambda: chain(*inputs, True)),
             ("shared", lambda: chain(*shared, True))]
    for mode in ("side", "chained", "side-mlp"):
        cases.append((mode, lambda mode=mode: prefetch_chain(*inputs, side, mode)))
    ref = chain(*inputs, True).clone()
    for label, fn in cases * 2:  # twice, alternated
        try:
            us = graph_us(fn, [()]) / LAYERS
            same = torch.equal(fn(), ref) if label != "shared" else "-"
            print(f"{label:9s} {us:7.2f} us a layer   same output as distinct: {same}",
                  flush=True)
        except Exception as e:  # noqa: BLE001  (a variant that does not compile or capture)
            print(f"{label:9s} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
