"""v14 on the H200: the decode bench's own cells (decode_step_bench, 40 timed steps), with the
time each step waits for its tokens' read-back event, and how many steps launched a decode
ahead. Waiting ~0 means the host bounds the step; a wait near the step means the GPU does.
The version is watched from outside its step: its loop's start_read and _decode_ahead are
wrapped, not changed."""
import time

import torch

import implementations
from implementations.v14_overlap import OverlapEngine
from torchlet.bench.micro import decode_step_bench
from torchlet.bench.workloads import QWEN25_05B, random_checkpoint
from torchlet.contract import MAX_STEP_TOKENS

STEPS, PROFILED = 40, 5
waits, launched = [], {"ahead": 0, "in order": 0}
start_read, decode_ahead = OverlapEngine.start_read, OverlapEngine._decode_ahead


def timed_read(self, tokens):
    wait = start_read(self, tokens)

    def timed():
        start = time.perf_counter()
        out = wait()
        waits.append(time.perf_counter() - start)
        return out
    return timed


def counted_ahead(self, batch, tokens):
    ahead = decode_ahead(self, batch, tokens)
    launched["in order" if ahead is None else "ahead"] += 1
    return ahead


OverlapEngine.start_read, OverlapEngine._decode_ahead = timed_read, counted_ahead
ckpt = random_checkpoint(QWEN25_05B, 0, device="cuda", dtype=torch.bfloat16)
version = implementations.load("v14_overlap")
for batch, context in ((256, 1024), (256, 128), (64, 1024), (1, 128)):
    waits.clear()
    launched.update({"ahead": 0, "in order": 0})
    row = decode_step_bench(version, ckpt, batch, context, device="cuda", dtype=torch.bfloat16,
                            wishes={MAX_STEP_TOKENS: 16384}, steps=STEPS,
                            profile_steps=PROFILED, bandwidth=4.3e12)
    timed = waits[-(STEPS + PROFILED):-PROFILED]  # the timed steps, before the profiled ones
    wait = sum(timed) / len(timed) * 1e3
    print(f"v14 B{batch} ctx{context}: {row['ms_per_step']:.3f} ms a step, kernels "
          f"{row['gpu_ms_per_step']:.3f} ms, waiting for the tokens {wait:.3f} ms (host "
          f"{row['ms_per_step'] - wait:.3f} ms); steps with a decode ahead: {launched}")
