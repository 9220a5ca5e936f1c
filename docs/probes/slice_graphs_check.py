"""v15's slice passes replayed from graphs against the same passes run eagerly (use_graphs=False),
on the bench's Qwen2.5-0.5B shape with random weights: greedy tokens of prompts cut into slices
beside decodes. Prints both token lists and whether they agree (v15's page watches the replays
themselves). GPU (bf16) or CPU (float32, under TRITON_INTERPRET=1 for the kernel path)."""
import random
import sys

import torch

import implementations
from torchlet.bench.run import ModelSpec
from torchlet.bench.workloads import CPU_MODEL, QWEN25_05B
from torchlet.contract import GenerationParams

cuda = torch.cuda.is_available()
device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
checkpoint = ModelSpec(config=QWEN25_05B if cuda else CPU_MODEL, seed=0).checkpoint(device, dtype)
version = implementations.load(sys.argv[1] if len(sys.argv) > 1 else "v15_chunked_prefill")
rng = random.Random(0)
prompts = [[rng.randrange(1000) for _ in range(n)] for n in (700, 90, 1500, 33)]
results = {}
for graphs in (False, True):
    engine = version.build(checkpoint, device=device, dtype=dtype, max_step_tokens=256,
                           max_lanes=8, use_graphs=graphs)
    ids = [engine.add_request(p, GenerationParams(max_new_tokens=24, ignore_eos=True))
           for p in prompts]
    out = {}
    while engine.has_unfinished():
        for o in engine.step():
            out[o.request_id] = o.tokens
    results[graphs] = [out[i] for i in ids]
    print(f"use_graphs={graphs}: {results[graphs]}")
same = [a == b for a, b in zip(results[False], results[True])]
print(f"agree per request: {same}; first difference at "
      f"{[next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None) for a, b in zip(results[False], results[True])]}")
