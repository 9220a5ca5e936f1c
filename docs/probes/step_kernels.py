"""Every kernel of one decode step of the newest version on the H200, by device time, at batch
1 x context 128 and batch 256 x context 1,024 (the targets' cells of issue 30), as the decode
bench times them; then the same cells with the LM head's logits cast to float32 inside the step,
as v05's decode_step did before (`--cast`, an A/B in one call). GPU only.

    PYTHONPATH=. python3 docs/probes/step_kernels.py [--cast]
"""
import sys

import torch

import implementations
from torchlet.bench import micro
from torchlet.bench.workloads import QWEN25_05B, random_checkpoint

device, dtype = "cuda", torch.bfloat16
CELLS = [(1, 128), (256, 1024)]
version = implementations.load(implementations.version_names()[-1])
ckpt = random_checkpoint(QWEN25_05B, 0, device=device, dtype=dtype)
profile = micro.device_profile
micro.device_profile = lambda run, steps: profile(run, steps, top=60)


def cells(label: str, tables: bool) -> None:
    for batch, context in CELLS:
        row = micro.decode_step_bench(version, ckpt, batch, context, device=device, dtype=dtype,
                                      wishes={}, bandwidth=4.3e12)
        print(f"{label} B={batch} ctx={context}: {row['ms_per_step']:.3f} ms a step, "
              f"{row['gpu_ms_per_step']:.3f} ms of kernels, {row['kernels_per_step']:.0f} "
              f"kernels", flush=True)
        if tables:
            for name, ms, n in row["top_kernels"]:
                print(f"    {ms * 1e3:8.1f} us {n:6.1f}x  {name}")


cells(version.name, tables=True)
if "--cast" in sys.argv:
    runner = implementations.load("v05_decode_lanes").package.LaneRunner
    step = runner.decode_step
    runner.decode_step = lambda self, *inputs: step(self, *inputs).float()
    cells(f"{version.name}, logits cast to float32 in the step", tables=False)
    runner.decode_step = step
