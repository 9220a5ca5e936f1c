"""v10's paged decode attention over ragged batches, as the workload's decode steps run it: the
graph's tables are max_model_len wide (126 pages of 16), the contexts drawn between 100 and 2,000
tokens, so one program per request x KV head leaves the SMs that hold short contexts idle while
the longest ones finish. Variants: v10's plan as it is, and every context cut into chunks of C
tokens at every batch (the split v10 takes below one program per SM, patched in for the probe),
timed in a CUDA graph of 20 calls; each variant's output checked against the plan as it is.
On an H100 (2026-12-06) the same cut in the workload itself (workload_steps.py --attention-chunk)
made it slower: docs/perf-notes.md.
Uniform cells (256 x 1,024, 64 x 4,096) beside them. GPU only.

    PYTHONPATH=. python3 docs/probes/paged_decode_ragged.py"""
import torch

import implementations
from torchlet.bench.micro import chain_ms

paged = implementations.load("v10_triton_paged_gqa").package.paged_kernels
device, dtype = "cuda", torch.bfloat16
WIDTH = 126  # pages of 16: max_model_len 2,011 as the workload bench builds it
original = paged._plan_splits


def case(contexts, kv_heads=2, group=7, head_dim=64, block=16, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    batch = len(contexts)
    used = [-(-c // block) for c in contexts]
    k = torch.randn(sum(used) + 1, block, kv_heads, head_dim, device=device, dtype=dtype,
                    generator=gen)
    order = (torch.randperm(sum(used), device=device, generator=gen) + 1).int()
    tables = torch.zeros(batch, max(WIDTH, *used), dtype=torch.int32, device=device)
    at = 0
    for b, n in enumerate(used):
        tables[b, :n] = order[at:at + n]
        at += n
    lens = torch.tensor(contexts, dtype=torch.int32, device=device)
    q = torch.randn(batch, kv_heads * group, head_dim, device=device, dtype=dtype, generator=gen)
    return q, k, torch.randn(k.shape, device=device, dtype=dtype, generator=gen), tables, lens


def plan(chunk):
    def patched(work, max_context, sms, per_sm=None):
        if chunk and per_sm is None and work >= sms:
            return paged._plan_fixed(max_context, chunk)
        return original(work, max_context, sms, per_sm)
    return patched


def main():
    gen = torch.Generator().manual_seed(1)
    cases = {f"ragged {b}": case(torch.randint(100, 2000, (b,), generator=gen).tolist())
             for b in (256, 131, 64)}
    cases["256 x 1,024"] = case([1024] * 256)
    cases["64 x 4,096"] = case([4096] * 64)
    expected = {}
    for chunk in (0, 128, 256, 512, 1024):
        paged._plan_splits = plan(chunk)
        cells = []
        for name, (q, k, v, tables, lens) in cases.items():
            out = paged.paged_decode_attention(q, k, v, tables, lens, 0.125)
            if chunk == 0:
                expected[name] = out
            err = (out.float() - expected[name].float()).abs().max().item()
            us = chain_ms(lambda: paged.paged_decode_attention(q, k, v, tables, lens, 0.125),
                          20, replays=5) * 1e3
            gb = int(lens.sum()) * 2 * 2 * 64 * 2 / (us * 1e-6) / 1e9
            cells.append(f"{name}: {us:.1f} us {gb:,.0f} GB/s (err {err:.1e})")
        print(f"chunk {chunk or 'as is'} | " + " | ".join(cells))
    paged._plan_splits = original


if __name__ == "__main__":
    main()
