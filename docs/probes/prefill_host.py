"""Host time of building a prefill's inputs on this CPU: v12's runner prefills 30 prompts of
100-1,024 tokens (about 16,000 rows) with its model pass stubbed (zeros), so what is timed is
assigning blocks, slots, positions, the copies and sealing. Median of 10 after 2 warm-ups.
`prefill_host.py DIR` times the versions in DIR, the implementations/ directory of another
checkout (e.g. a `git archive` of an older commit), for an A/B."""
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

import implementations
from spec.support.models.fixtures import tiny_checkpoint

tree = Path(sys.argv[1]) if len(sys.argv) > 1 else None
version = implementations.load("v12_prefix_cache", tree) if tree else \
    implementations.load("v12_prefix_cache")
ckpt = tiny_checkpoint("tiny_qwen2")
ckpt = type(ckpt)(replace(ckpt.config, max_position=4096), ckpt.tensors)
engine = version.build(ckpt, dtype=torch.float32, use_graphs=False, max_lanes=64,
                       max_model_len=1100, max_step_tokens=20000)
runner, hidden = engine.runner, ckpt.config.hidden_size
runner.model.forward_prefill_cached = lambda weights, ids, *rest: torch.zeros(ids.shape[0], hidden)
rng, times = random.Random(0), []
for round_ in range(12):
    prompts = [[rng.randrange(3, 500) for _ in range(rng.randint(100, 1024))] for _ in range(30)]
    ids = list(range(round_ * 100, round_ * 100 + 30))
    start = time.perf_counter()
    engine.prefill(ids, prompts)
    times.append((time.perf_counter() - start) * 1e3)
    for i in ids:
        engine.release(i)
print(f"{tree or 'this checkout'}: prefill inputs {statistics.median(times[2:]):.2f} ms (median)")
