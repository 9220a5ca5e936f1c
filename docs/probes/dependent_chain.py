"""What the paged decode kernel's place in a batch-1 layer costs, and (`--plans`) which gemv
plan the layer chain runs fastest under. One layer's chain of real ops at one row,
Qwen2.5-0.5B's shapes in bfloat16 (the q/k/v gemv with RoPE and the store, paged decode
attention over 128 or 1,024 tokens in pages of 16 in random order, the o gemv, norm_gemv over
[gate | up], down's partial sums left pending for the next layer's q/k/v gemv to form, as a
decode step runs them since 2026-12-06's 14:56 session; the last layer's settled), 24 layers
each on its own weights and cache, captured in
one CUDA graph and replayed (gemv_variants.py's timing; docs/gpu.md's first figures, 2026-12-06
11:47, came from 20 replays, this times 5); us a layer. Four ways: with and without the
attention (its output replaced by q's own row, so the o gemv reads the q/k/v kernel's output
directly), each with the dependent launch on and off (gemv.launches_dependent, which the
attention asks too since 2026-12-06's second session: gemv.dependent_decode_attention). What
the attention adds to a layer against what it takes alone (24 calls in a graph of their own)
is what its two boundaries cost. With `--plans`: the whole chain (attention in, launched
dependent) at 128 tokens under each of a few gemv plans (rows a program, columns a tile,
columns a share of a split k) in gemv.plan's place, fastest first. GPU only (Hopper).

    PYTHONPATH=. python3 docs/probes/dependent_chain.py [--plans]
"""
import sys
from pathlib import Path

import torch

import implementations

sys.path.insert(0, str(Path(__file__).parent))
from gemv_variants import graph_us  # noqa: E402  (its timing: a graph of calls, replayed)

v13 = implementations.load("v13_fused").package
gemv, paged = v13.gemv, v13.paged_kernels
device, dtype, LAYERS = "cuda", torch.bfloat16, 24
HIDDEN, INTER, N_Q, N_KV, HEAD_DIM, BLOCK = 896, 4864, 14, 2, 64, 16


def randn(*shape, scale=1.0):
    return torch.randn(*shape, device=device, dtype=dtype) * scale


def layer_weights(context: int):
    width = (N_Q + 2 * N_KV) * HEAD_DIM
    pages = -(-(context + 1) // BLOCK)
    k_cache, v_cache = (randn(pages + 1, BLOCK, N_KV, HEAD_DIM) for _ in range(2))
    return dict(qkv=randn(width, HIDDEN, scale=0.03), qkv_b=randn(width, scale=0.1),
                o=randn(HIDDEN, HIDDEN, scale=0.03), gate_up=randn(2 * INTER, HIDDEN, scale=0.03),
                down=randn(HIDDEN, INTER, scale=0.015), norm1=randn(HIDDEN), norm2=randn(HIDDEN),
                k_cache=k_cache, v_cache=v_cache,
                table=(torch.randperm(pages, device=device) + 1).int().view(1, pages))


def chain(layers, h, res, cos, sin, lens, slot, attend: bool):
    for w in layers:
        q, _, _ = gemv.gemv_rope_split(h, w["qkv"], w["qkv_b"], cos, sin, N_Q, N_KV,
                                       (w["k_cache"], w["v_cache"], slot))
        out = (gemv.dependent_decode_attention(q, w["k_cache"], w["v_cache"], w["table"], lens,
                                               HEAD_DIM ** -0.5) if attend else q)
        o = gemv.gemv(out.reshape(1, HIDDEN), w["o"])
        gu, res = gemv.norm_gemv(o, res, w["norm1"], 1e-6, w["gate_up"])
        h, res = gemv.pending_add_norm(gu, w["down"], None, res, w["norm2"], 1e-6, swiglu=True)
    return gemv.settle(h)


def plans():
    """gemv.plan's stand-ins: (rows a program, columns a tile, columns a share of a long k)."""
    import triton

    def plan(rows, cols, share):
        return lambda n, k, on_gpu: (rows, cols, triton.cdiv(k, share))
    return [(f"N{r} K{c} share{s}", plan(r, c, s))
            for r in (2, 4, 8, 16) for c in (256, 512, 1024, 2048) for s in (1024, 2048, 4096)
            if c <= s]


def step_inputs(context: int):
    """24 layers' weights and caches, and one row's inputs at position `context`: (layers, h,
    res, cos, sin, lens, slot), chain's arguments before `attend`."""
    layers = [layer_weights(context) for _ in range(LAYERS)]
    h, res = randn(1, HIDDEN), randn(1, HIDDEN)
    angles = torch.full((1, HEAD_DIM // 2), float(context), device=device)
    lens = torch.tensor([context + 1], device=device, dtype=torch.int32)
    slot = torch.tensor([context], device=device, dtype=torch.int64)
    return layers, h, res, angles.cos(), angles.sin(), lens, slot


def sweep_plans():
    torch.manual_seed(0)
    inputs = step_inputs(128)
    own, timed = gemv.plan, []
    for label, plan in [("as it is", own)] + plans():
        gemv.plan = plan
        try:
            timed.append((graph_us(lambda: chain(*inputs, True), [()]) / LAYERS, label))
        except Exception as e:  # noqa: BLE001  (out of registers or shared memory)
            timed.append((float("inf"), f"{label} {type(e).__name__}"))
        finally:
            gemv.plan = own
    for us, label in sorted(timed):
        print(f"{us:7.2f} us a layer  {label}", flush=True)


def main():
    if "--plans" in sys.argv:
        return sweep_plans()
    torch.manual_seed(0)
    own = gemv.launches_dependent
    for context in (128, 1024):
        inputs = step_inputs(context)
        layers, lens = inputs[0], inputs[5]
        cells = {}
        for dependent in (True, False):
            gemv.launches_dependent = own if dependent else (lambda x: False)
            for attend in (True, False):
                cells[dependent, attend] = graph_us(
                    lambda: chain(*inputs, attend), [()]) / LAYERS
        gemv.launches_dependent = own
        q = randn(1, N_Q, HEAD_DIM)
        alone = graph_us(lambda w: paged.paged_decode_attention(
            q, w["k_cache"], w["v_cache"], w["table"], lens, HEAD_DIM ** -0.5),
            [(w,) for w in layers])
        for dependent in (True, False):
            with_, without = cells[dependent, True], cells[dependent, False]
            print(f"context {context:5d}, dependent launch {'on ' if dependent else 'off'}: "
                  f"a layer {with_:6.2f} us, without attention {without:6.2f} us: attention "
                  f"adds {with_ - without:5.2f} us; alone, chained {alone:5.2f} us", flush=True)


if __name__ == "__main__":
    main()
