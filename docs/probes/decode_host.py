"""Host time of decode steps at 256 lanes on this CPU, of v13 or of the version named (e.g.
`v14_overlap`): 256 requests of ~1,000-token prompts (tiny_qwen2, float32, graphs off, Triton
off), the graphs' run replaced by its own first output, so that what a step still costs is the
engine's, scheduler's and runner's Python. Medians of 5 x 20 steps, then `--profile` for a
cProfile of 20 (by own time, or `--cumulative`); `--short`: prompts of 100-150 tokens."""
import cProfile
import os
import pstats
import random
import sys
import time
from dataclasses import replace

os.environ["TRITON_INTERPRET"] = "0"
import torch  # noqa: E402

import implementations  # noqa: E402
from spec.support.models.fixtures import tiny_checkpoint  # noqa: E402
from torchlet.contract import GenerationParams  # noqa: E402

torch.set_num_threads(1)
ckpt = tiny_checkpoint("tiny_qwen2")
ckpt = type(ckpt)(replace(ckpt.config, max_position=2048), ckpt.tensors)
LENGTHS = (100, 150) if "--short" in sys.argv else (950, 1050)
version = next((a for a in sys.argv[1:] if a.startswith("v")), "v13_fused")
engine = implementations.load(version).build(
    ckpt, dtype=torch.float32, max_lanes=256, use_graphs=False, max_model_len=1300,
    max_step_tokens=300000)
rng = random.Random(0)
for _ in range(256):
    engine.add_request([rng.randrange(3, 500) for _ in range(rng.randint(*LENGTHS))],
                       GenerationParams(max_new_tokens=200))
while True:  # admissions and prefills, until all 256 decode in one step
    engine.step()
    if len(engine.last_step_stats().decode_ids) == 256:
        break


def stubbed(real):
    """The graphs' run, each bucket's outputs computed once and handed back after."""
    seen = {}

    def run(bucket):
        if bucket not in seen:
            seen[bucket] = real(bucket)
        return seen[bucket]
    return run


for graphs in engine.runner.graphs.values():  # one set per way the sampler draws
    graphs.run = stubbed(graphs.run)
engine.step()
times = []
for _ in range(5):
    start = time.perf_counter()
    for _ in range(20):
        engine.step()
    times.append((time.perf_counter() - start) / 20 * 1e3)
print("host ms a step:", " ".join(f"{t:.2f}" for t in times), f"median {sorted(times)[2]:.2f}")
if "--profile" in sys.argv:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(20):
        engine.step()
    profile.disable()
    pstats.Stats(profile).sort_stats("cumtime" if "--cumulative" in sys.argv else "tottime").print_stats(25)
