"""v13 on the H200: the wall time of prefill steps of about 16,000 rows (prompts of 100-1,024
tokens, nothing cached), then a cProfile of 20 decode steps at batch 256, context 1024."""
import cProfile
import pstats
import random
import time

import torch

import implementations
from torchlet.bench.workloads import QWEN25_05B, random_checkpoint
from torchlet.contract import GenerationParams

device, dtype = "cuda", torch.bfloat16
ckpt = random_checkpoint(QWEN25_05B, 0, device=device, dtype=dtype)
version = implementations.load("v13_fused")
rng = random.Random(0)
engine = version.build(ckpt, device=device, dtype=dtype, max_running=256, max_step_tokens=16384,
                       max_model_len=2048)
for i in range(4):  # the first compiles the kernels
    rows = 0
    while rows < 16000:
        n = rng.randint(100, 1024)
        rows += n
        engine.add_request([rng.randrange(1000, 100000) for _ in range(n)],
                           GenerationParams(max_new_tokens=1, ignore_eos=True))
    torch.cuda.synchronize()
    start = time.perf_counter()
    engine.step()
    torch.cuda.synchronize()
    print(f"prefill step of {rows} rows: {(time.perf_counter() - start) * 1e3:.1f} ms")
del engine
torch.cuda.empty_cache()
engine = version.build(ckpt, device=device, dtype=dtype, max_running=256, max_step_tokens=65536,
                       max_model_len=2048)
ids = [engine.add_request([rng.randrange(1000, 100000) for _ in range(1024)],
                          GenerationParams(max_new_tokens=600, ignore_eos=True))
       for _ in range(256)]
while min(len(engine.output(i).tokens) for i in ids) < 1:
    engine.step()
for _ in range(5):
    engine.step()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(20):
    engine.step()
torch.cuda.synchronize()
print(f"batch 256, context 1024: {(time.perf_counter() - start) * 50:.2f} ms a step")
profile = cProfile.Profile()
profile.enable()
for _ in range(20):
    engine.step()
torch.cuda.synchronize()
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(30)
