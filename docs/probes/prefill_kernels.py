"""Where a workload-sized prefill step of the newest version spends its time on the GPU: prompts
of 100-1,024 tokens (nano-vllm's workload's range, nothing cached) until a step holds about
16,000 rows, as the gpu-workload bench's first steps do; two such steps to warm up (the kernels
compile), then one timed and one profiled (its kernels by device time, micro.device_profile's
table), against the step's floor in FLOPs at 790 TFLOP/s. GPU only.

    PYTHONPATH=. python3 docs/probes/prefill_kernels.py
"""
import random
import time

import torch

import implementations
from torchlet.bench import micro
from torchlet.bench.workloads import QWEN25_05B, random_checkpoint
from torchlet.contract import GenerationParams

device, dtype, ROWS = "cuda", torch.bfloat16, 16000
ckpt = random_checkpoint(QWEN25_05B, 0, device=device, dtype=dtype)
version = implementations.load(implementations.version_names()[-1])
engine = version.build(ckpt, device=device, dtype=dtype, max_running=256, max_step_tokens=16384,
                       max_model_len=2048)
rng = random.Random(0)
c = ckpt.config
# Per row: 2 flops a weight of the layers' matrices (the LM head runs on the last rows only).
LAYER_WEIGHTS = c.num_layers * c.hidden_size * (
    (c.num_heads + 2 * c.num_kv_heads) * c.head_dim + c.num_heads * c.head_dim
    + 3 * c.intermediate_size)


def queue() -> tuple[int, list[int]]:
    rows, lengths = 0, []
    while rows < ROWS:
        n = rng.randint(100, 1024)
        rows += n
        lengths.append(n)
        engine.add_request([rng.randrange(1000, 100000) for _ in range(n)],
                           GenerationParams(max_new_tokens=1, ignore_eos=True))
    return rows, lengths


def step() -> None:
    engine.step()
    torch.cuda.synchronize()


for _ in range(2):
    queue()
    step()
rows, lengths = queue()
start = time.perf_counter()
step()
wall = (time.perf_counter() - start) * 1e3
flops = 2 * rows * LAYER_WEIGHTS + sum(
    2 * 2 * n * n / 2 * c.num_heads * c.head_dim * c.num_layers for n in lengths)
print(f"{version.name}: a prefill step of {rows} rows ({len(lengths)} prompts): {wall:.1f} ms; "
      f"its FLOPs at 790 TFLOP/s: {flops / 790e12 * 1e3:.1f} ms", flush=True)
queue()
table = micro.device_profile(step, 1, top=25)
print(f"profiled: {table.get('gpu_ms_per_step', 0):.1f} ms of kernels, "
      f"{table.get('kernels_per_step', 0):.0f} launches")
for name, ms, n in table.get("top_kernels", []):
    print(f"    {ms:8.2f} ms {n:6.0f}x  {name}")
