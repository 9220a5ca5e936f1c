"""v13's context_attention on one request's slice of rows late in its context (v15's chunked
prefill), the Qwen2.5-0.5B shape (14 query heads on 2 KV heads, head_dim 64, bf16, pages of 16
tokens in random order): ms a call and TFLOP/s, eager (host launches included) and replayed in
a CUDA graph (the kernels alone), with the max abs error against torch's SDPA on the gathered
context. With a path to a previous context_attention.py, that module is timed too, on the same
inputs; then the current one under forced split counts and tile sizes (module constants patched).

    git show a55636d:implementations/v13_fused/context_attention.py > previous.py
    PYTHONPATH=. python docs/probes/context_attention_split.py previous.py

Without CUDA it runs tiny float32 shapes under the Triton interpreter: a check of this script.
"""
import importlib.util
import os
import sys

import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything decorates a Triton kernel

import triton  # noqa: E402

import implementations  # noqa: E402

new = implementations.load("v13_fused").package.context_attention
device, dtype = ("cuda", torch.bfloat16) if CUDA else ("cpu", torch.float32)
HEADS, KV_HEADS, HEAD_DIM, BLOCK = (14, 2, 64, 16) if CUDA else (4, 2, 8, 4)
# (rows, context): the rows are the last of the context.
CASES = ([(512, 2048), (512, 8192), (2048, 2048), (2048, 8192)] if CUDA
         else [(3, 600), (20, 100)])
TOLERANCE = 0.05 if CUDA else 1e-4  # bf16 outputs of O(1) values; float32 interpreted


def previous(path):
    """The module at `path`, imported as a sibling of v13's, so that its relative imports and
    its custom op's name (from the module's name) do not clash with the current one."""
    spec = importlib.util.spec_from_file_location(
        new.__name__.rsplit(".", 1)[0] + ".previous_context_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(rows, context, gen):
    pages = -(-context // BLOCK)
    k_cache = torch.randn(pages + 1, BLOCK, KV_HEADS, HEAD_DIM, generator=gen).to(device, dtype)
    v_cache = torch.randn(k_cache.shape, generator=gen).to(device, dtype)
    table = torch.randperm(pages, generator=gen) + 1  # block 0 stays the null block
    p = torch.arange(context)
    slots = (table[p // BLOCK] * BLOCK + p % BLOCK).to(device)
    q = torch.randn(rows, HEADS, HEAD_DIM, generator=gen).to(device, dtype)
    row_indptr = torch.tensor([0, rows], device=device)
    context_indptr = torch.tensor([0, context], device=device)
    return q, k_cache, v_cache, row_indptr, slots, context_indptr, context


def reference(q, k_cache, v_cache, row_indptr, slots, context_indptr, context):
    """SDPA in float32 over the gathered context, the mask aligned to the bottom right."""
    rows, group = q.shape[0], HEADS // KV_HEADS
    keys, values = (c.flatten(0, 1)[slots].float().repeat_interleave(group, dim=1)
                    for c in (k_cache, v_cache))
    seen = torch.arange(context, device=device)[None, :] <= \
        (context - rows + torch.arange(rows, device=device))[:, None]
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1),
        attn_mask=seen, scale=HEAD_DIM ** -0.5)
    return out.transpose(0, 1)


def ms(fn, graphed, n=20):
    """Mean ms a call: n calls back to back, eager or replayed from one CUDA graph of n calls."""
    if not CUDA:
        return float("nan")
    fn()  # compiles outside any capture
    torch.cuda.synchronize()
    run, reps = fn, n
    if graphed:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                fn()
        run, reps = graph.replay, 1
    run()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def measure(name, module, args, expected, flops):
    def call():
        return module.context_attention(*args, HEAD_DIM ** -0.5)

    try:
        error = (call().float() - expected).abs().max().item()
        eager, graphed = ms(call, False), ms(call, True)
    except Exception as e:  # a variant that does not compile is a line of the report, not the end
        print(f"  {name}: FAILED: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}")
        return False
    ok = error <= TOLERANCE
    print(f"  {name}: eager {eager:.3f} ms, graphed {graphed:.3f} ms "
          f"({flops / graphed / 1e9:.0f} TFLOP/s), max abs error {error:.1e}"
          + ("" if ok else f" > {TOLERANCE}: WRONG"))
    return ok


def forced(splits):
    """A plan of `splits` chunks of whole 128-token tiles, whatever the shapes."""
    def plan(work, max_context, sms):
        chunk = triton.cdiv(triton.cdiv(max_context, splits), 128) * 128
        return triton.cdiv(max_context, chunk), chunk
    return plan


def main(argv):
    old = previous(argv[0]) if argv else None
    gen, ok = torch.Generator().manual_seed(0), True
    kernels, kernel = new.paged_kernels, new._context_attention_kernel
    planned, block_m, run = kernels._plan_splits, new.BLOCK_M, kernel.run
    plans = []

    def spy(*shapes):  # what the op planned, for the report
        plans.append(planned(*shapes))
        return plans[-1]

    for rows, context in CASES:
        args = inputs(rows, context, gen)
        expected = reference(*args)
        keys = sum(context - rows + j + 1 for j in range(rows))  # each row's keys, causal
        flops = 4 * keys * HEADS * HEAD_DIM
        print(f"rows {rows}, context {context}: {flops / 1e9:.2f} GFLOP")
        if old is not None:
            ok &= measure("previous", old, args, expected, flops)
        kernels._plan_splits = spy
        try:
            new.context_attention(*args, HEAD_DIM ** -0.5)
        finally:
            kernels._plan_splits = planned
        ok &= measure(f"current (splits, chunk = {plans[-1]})", new, args, expected, flops)
        variants = ([(s, m, w) for s in (1, 2, 4, 8) for m in (64, 128) for w in (4, 8)] if CUDA
                    else [(2, 64, 4)])
        for splits, tile, warps in variants:
            kernels._plan_splits, new.BLOCK_M = forced(splits), tile
            kernel.run = lambda *a, w=warps, **k: run(*a, **{"num_warps": w, **k})
            try:
                ok &= measure(f"splits {splits}, BLOCK_M {tile}, {warps} warps", new, args,
                              expected, flops)
            finally:
                kernels._plan_splits, new.BLOCK_M, kernel.run = planned, block_m, run
    print("all within tolerance" if ok else "SOME RESULTS WRONG OR FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
