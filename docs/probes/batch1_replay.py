"""v13 at batch 1 on the H200: a decode step's wall time, the bare CUDA graph replay of its
bucket (host time of the launch; replays back to back, which is the graph's GPU time with the
gaps between its kernels), and a cProfile of 200 steps."""
import cProfile
import pstats
import time

import torch

import implementations
from torchlet.bench.workloads import QWEN25_05B, random_checkpoint
from torchlet.contract import GenerationParams

device, dtype = "cuda", torch.bfloat16
ckpt = random_checkpoint(QWEN25_05B, 0, device=device, dtype=dtype)
engine = implementations.load("v13_fused").build(ckpt, device=device, dtype=dtype,
                                                 max_lanes=256, max_model_len=2048)
engine.add_request(list(range(1000, 1128)), GenerationParams(max_new_tokens=1500, ignore_eos=True))
for _ in range(20):
    engine.step()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(200):
    engine.step()
torch.cuda.synchronize()
print(f"step: {(time.perf_counter() - start) / 200 * 1e3:.3f} ms")
graph = engine.runner.graphs["greedy"].graphs[1]._graph  # the bucket-1 torch.cuda.CUDAGraph
start = time.perf_counter()
for _ in range(200):
    graph.replay()
launched = time.perf_counter()
torch.cuda.synchronize()
done = time.perf_counter()
print(f"bare replay: {(launched - start) / 200 * 1e3:.4f} ms of host a launch, "
      f"{(done - start) / 200 * 1e3:.3f} ms a replay back to back")
profile = cProfile.Profile()
profile.enable()
for _ in range(200):
    engine.step()
torch.cuda.synchronize()
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(25)
