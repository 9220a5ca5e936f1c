"""v13's attend_project on a GPU (issue 48): the newest version's one-row decode step
(Qwen2.5-0.5B's shape, random weights, bf16), timed as `bench decode` times it, with the attention
and o as two launches (attend_project.ON_GPU off) and as one (on: the attention's programs hand
the heads' output to o's within the launch) at 4, 8 and 16 of o's rows a program
(attend_project.O_ROWS), alternated twice, at 128 and 384 tokens (v10's plan splits neither);
the step's kernels in the first round. Then Qwen3-0.6B's shape at 128 tokens, apart and fused,
twice: the other model the targets name.
`--quick`: once. GPU only.

    PYTHONPATH=. python3 docs/probes/attend_project_rows.py [--quick]

(Till 2026-12-07 attend_project's programs each attended their KV head's group again for their
block of o's rows; this probe then swept the rows a program of that kernel: docs/perf-notes.md.)
"""
import sys

import torch

import implementations
from torchlet.bench import micro
from torchlet.bench.workloads import QWEN3_06B, QWEN25_05B, random_checkpoint

device, dtype = "cuda", torch.bfloat16
version = implementations.load(implementations.version_names()[-1])
ap = implementations.load("v13_fused").package.attend_project
qwen25 = random_checkpoint(QWEN25_05B, 0, device=device, dtype=dtype)
CONTEXTS = (128, 384)
ROUNDS = 1 if "--quick" in sys.argv else 2
ROWS = (4, 8, 16)  # o's rows a program (attend_project.O_ROWS)


def cell(label: str, context: int, kernels: bool, ckpt=qwen25) -> None:
    row = micro.decode_step_bench(version, ckpt, 1, context, device=device, dtype=dtype,
                                  wishes={}, bandwidth=4.3e12)
    print(f"{label:>11} 1 x {context}: {row['ms_per_step']:.4f} ms a step, "
          f"{row['gpu_ms_per_step']:.4f} ms of kernels, {row['kernels_per_step']:.0f} kernels",
          flush=True)
    if kernels:
        for name, ms, n in row["top_kernels"][:8]:
            print(f"    {ms * 1e3:8.1f} us {n:6.1f}x  {name[:80]}")


for round_ in range(ROUNDS):
    for rows in (None,) + ROWS:
        ap.ON_GPU, ap.O_ROWS = rows is not None, rows or 8
        for context in CONTEXTS:
            cell(f"o rows {rows}" if rows else "apart", context,
                 round_ == 0 and context == 128 and rows in (None, 8))

qwen3 = random_checkpoint(QWEN3_06B, 0, device=device, dtype=dtype)
for round_ in range(ROUNDS):
    for rows in (None,) + ROWS:
        ap.ON_GPU, ap.O_ROWS = rows is not None, rows or 8
        cell(f"qwen3 {rows or 'apart'}", 128, False, qwen3)
