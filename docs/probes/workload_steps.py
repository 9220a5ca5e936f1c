"""nano-vllm's workload on one version, step by step: each step's prefill and decode rows and its
wall time (the first 40 steps, or none with --quiet), then the decode steps' times by batch
size, and the decode graphs' replays by bucket (graph_stats, warm-up included). Built as
`torchlet bench gpu-workload` builds it, after the same warm-up.

With --bucket-step N, v07's decode buckets double up to N lanes, then step by N (v07's
BUCKET_STEP, 32, patched for an experiment; 256 gives the doubling buckets of before 2026-12-06),
in the runner and in v20's move rule alike, which both read default_buckets.
With --attention-chunk C, v10's decode attention cuts every context into chunks of C tokens at
every batch (its split below one program per SM, patched in; docs/probes/paged_decode_ragged.py).

    PYTHONPATH=. python docs/probes/workload_steps.py [VERSION] [--quiet] [--bucket-step N]
        [--attention-chunk C]"""
import collections
import sys
import time

import torch

import implementations
from torchlet.bench.drive import warm_up
from torchlet.bench.workloads import QWEN25_05B, nano_vllm_workload, random_checkpoint

device, dtype = "cuda", torch.bfloat16
ckpt = random_checkpoint(QWEN25_05B, 0, device=device, dtype=dtype)


def option(name: str) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else 0


step, chunk = option("--bucket-step"), option("--attention-chunk")
names = [a for a in sys.argv[1:] if not a.startswith("--") and a not in (str(step), str(chunk))]
if chunk:
    paged = implementations.load("v10_triton_paged_gqa").package.paged_kernels
    plan = paged._plan_splits

    def chunked(work, max_context, sms, per_sm=None):
        if per_sm is None and work >= sms:  # decode only: v13's prefill passes its per_sm
            return paged._plan_fixed(max_context, chunk)
        return plan(work, max_context, sms, per_sm)
    paged._plan_splits = chunked
if step:
    from implementations.v07_cuda_graph import runner as graph_runner
    graph_runner.BUCKET_STEP = step  # default_buckets reads it at each call
version = implementations.load(names[0] if names else "v13_fused")
engine = version.build(ckpt, device=device, dtype=dtype, max_lanes=256,
                       max_step_tokens=16384, max_model_len=2011, num_blocks=17423)
workload = nano_vllm_workload()
warm_up(engine, workload, True)
torch.cuda.synchronize()
start = time.perf_counter()
for i, prompt in enumerate(workload.prompts):
    engine.add_request(list(prompt), workload.params(i))
print(f"add_request x {len(workload.prompts)}: {(time.perf_counter() - start) * 1e3:.1f} ms")
steps = []
while engine.has_unfinished():
    before = time.perf_counter()
    engine.step()
    stats = engine.last_step_stats()
    steps.append((stats.num_prefill_tokens, stats.num_decode_tokens,
                  (time.perf_counter() - before) * 1e3))
print(f"wall {time.perf_counter() - start:.3f} s")
for i, (prefill, decode, ms) in enumerate(steps[:0 if "--quiet" in sys.argv else 40]):
    print(f"step {i}: {prefill} prefill rows, {decode} decode rows, {ms:.1f} ms")
by_batch = collections.defaultdict(list)
for prefill, decode, ms in steps:
    if not prefill:
        by_batch[decode // 32 * 32].append(ms)
for batch, times in sorted(by_batch.items()):
    print(f"decode rows {batch}-{batch + 31}: {len(times)} steps, median "
          f"{sorted(times)[len(times) // 2]:.2f} ms")
replays = {b: c["replays"] for b, c in engine.graph_stats().items() if c["replays"]}
print("decode graph replays by bucket:", ", ".join(f"{b}: {n}" for b, n in replays.items()))
