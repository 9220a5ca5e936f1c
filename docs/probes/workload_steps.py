"""nano-vllm's workload on one version, step by step: each step's prefill and decode rows and its
wall time (the first 40 steps, or none with --quiet), then the decode steps' times by batch
size, and the decode graphs' replays by bucket (graph_stats, warm-up included). Built as
`torchlet bench gpu-workload` builds it, after the same warm-up.

With --bucket-step N (v20 and later), the decode graphs' buckets are v07's doubling ones up to
N lanes, then one every N lanes, in the runner and in v20's move rule alike: an experiment,
the buckets patched into the two modules that read them, not an option of any version.

    PYTHONPATH=. python docs/probes/workload_steps.py [VERSION] [--quiet] [--bucket-step N]"""
import collections
import sys
import time

import torch

import implementations
from torchlet.bench.drive import warm_up
from torchlet.bench.workloads import QWEN25_05B, nano_vllm_workload, random_checkpoint

device, dtype = "cuda", torch.bfloat16
ckpt = random_checkpoint(QWEN25_05B, 0, device=device, dtype=dtype)
step = int(sys.argv[sys.argv.index("--bucket-step") + 1]) if "--bucket-step" in sys.argv else 0
names = [a for a in sys.argv[1:] if not a.startswith("--") and a != str(step)]
if step:
    from implementations.v07_cuda_graph import runner as graph_runner
    from implementations.v20_live_lanes import kv as live_kv
    doubling = graph_runner.default_buckets

    def finer(lanes: int) -> tuple[int, ...]:
        small = doubling(min(step, lanes))
        return small + tuple(range(small[-1] + step, lanes, step)) + \
            ((lanes,) if lanes > small[-1] else ())
    graph_runner.default_buckets = live_kv.default_buckets = finer
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
