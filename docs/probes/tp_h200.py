"""Issue 28 in one device call: v16's GPU specs (gpu and gpu2), nano-vllm's workload at each
tensor-parallel degree on the Qwen2.5-0.5B and Qwen2.5-7B shapes, and a Qwen2.5-72B-shaped
model (random bf16, each rank drawing only its shard) at the highest degree: batch-1 decode step
against its weight-read floor, batch-64 decode tok/s, each GPU's peak memory. Every step is a
child process (pytest, `torchlet bench tp`) with NVLink multicast off in its environment, which
the ranks it starts inherit.

    PYTHONPATH=. python3 docs/probes/tp_h200.py                                   # 2 GPUs
    PYTHONPATH=. python3 docs/probes/tp_h200.py --tensor-parallel 1 --big-layers 8  # one H200
    PYTHONPATH=. python3 docs/probes/tp_h200.py --device cpu --scale 16 --layers 2 \\
        --requests 4 --cut 16 --context 16 --steps 3                              # a dry run

Writes tp_h200.log (all it printed), specs.txt and one JSON of `torchlet bench tp` a model under
--out (default: $OUT, else tp-results): five files, within what a device call brings back."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}
SHAPES = {"0.5b": "qwen2.5-0.5b", "7b": "qwen2.5-7b", "72b": "qwen2.5-72b"}
GIB = 2 ** 30


def run(command: list[str], log, timeout: int, **env: str) -> tuple[int, list[str]]:
    """The command's exit status and output lines, each printed and logged as it comes."""
    log(f"$ {' '.join(command)}")
    start, lines = time.time(), []
    env = {**os.environ, **NO_MULTICAST, "PYTHONUNBUFFERED": "1", **env}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env) as child:
        try:
            for line in child.stdout:
                lines.append(line.rstrip())
                log(line.rstrip())
                if time.time() - start > timeout:
                    raise subprocess.TimeoutExpired(command, timeout)
            status = child.wait()
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            status = 124
    log(f"(exit {status}, {time.time() - start:.1f} s)")
    return status, lines


def bench(args, shape: str, extra: list[str], log) -> dict | None:
    """`torchlet bench tp` on one shape; its JSON, copied under --out, or None if it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "torchlet", "bench", "tp", "--model-shape", SHAPES[shape],
                   "--device", args.device, "--quiet", "--out", tmp, "--scale", str(args.scale),
                   *(["--layers", str(args.layers)] if args.layers else []), *extra]
        status, _ = run(command, log, args.timeout)
        found = Path(tmp) / "tp.json"
        if status != 0 or not found.exists():
            return None
        shutil.copy(found, args.out / f"{shape}.json")
        return json.loads(found.read_text())


def workload_lines(shape: str, payload: dict) -> list[str]:
    """Each degree's wall time and tok/s (rank 0), and every rank's peak memory."""
    by_tp: dict[int, list[dict]] = {}
    for row in payload["rows"]:
        by_tp.setdefault(row["tensor_parallel"], []).append(row)
    out, first = [], None
    for tp, rows in sorted(by_tp.items()):
        lead = rows[0]
        first = first or lead["wall_s"]
        peaks = ", ".join(f"{r['peak_mib'] / 1024:.2f}" for r in rows)
        out.append(f"{shape} TP={tp}: {lead['wall_s']:.2f} s, {lead['output_tok_s']:,.0f} output "
                   f"tok/s, x{first / lead['wall_s']:.2f} of the lowest degree's speed; peak GiB "
                   f"per rank {peaks}")
    return out


def big_lines(payload: dict) -> list[str]:
    """The big model's decode steps against the weight-read floor (rank 0's weights)."""
    out = []
    for row in payload["rows"]:
        if row["rank"] == 0:
            out.append(f"72b TP={row['tensor_parallel']} B={row['batch']}: step "
                       f"{row['step_ms']:.2f} ms, floor {row['floor_ms']:.2f} ms "
                       f"(x{row['step_ms'] / row['floor_ms']:.2f}), {row['decode_tok_s']:,.0f} "
                       f"decode tok/s")
    peaks = sorted({(r["rank"], r["peak_mib"], r["weights_mib"], r["kv_mib"])
                    for r in payload["rows"]})
    out += [f"72b rank {rank}: peak {peak / 1024:.2f} GiB, weights {w / 1024:.2f} GiB, K/V "
            f"{kv / 1024:.2f} GiB" for rank, peak, w, kv in peaks]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tensor-parallel", default="1,2", help="degrees of the workloads; the big "
                                                           "model runs at the highest")
    p.add_argument("--only", default="specs,0.5b,7b,72b", help="which steps, comma-separated")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", default=os.environ.get("OUT") or "tp-results")
    p.add_argument("--layers", type=int, default=None, help="every shape with N layers")
    p.add_argument("--big-layers", type=int, default=None, help="the 72B shape with N layers")
    p.add_argument("--scale", type=int, default=1, help="widths divided by N (a dry run)")
    p.add_argument("--requests", type=int, default=256, help="of nano-vllm's workload")
    p.add_argument("--cut", type=int, default=None, help="prompts and outputs cut to N tokens")
    p.add_argument("--batches", default="1,64", help="the big model's decode batches")
    p.add_argument("--context", type=int, default=1024, help="the big model's prompt tokens")
    p.add_argument("--steps", type=int, default=20, help="the big model's decode steps timed")
    p.add_argument("--timeout", type=int, default=420, help="seconds a step may take")
    args = p.parse_args()
    args.out = Path(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    logfile = open(args.out / "tp_h200.log", "w")

    def log(line: str) -> None:
        print(line, flush=True)
        logfile.write(line + "\n")
        logfile.flush()

    os.environ.update(NO_MULTICAST)
    log(f"tp_h200 {' '.join(sys.argv[1:])}; "
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    summary = []
    if "specs" in only:
        status, lines = run([sys.executable, "-m", "pytest", "-m", "gpu or gpu2", "-q", "-rs",
                             "-p", "no:cacheprovider", "spec/test_v16_tensor_parallel.py"],
                            log, args.timeout, CI="1")
        (args.out / "specs.txt").write_text("\n".join(lines) + "\n")
        summary.append(f"specs (exit {status}): {lines[-1] if lines else 'no output'}")
    workload = ["--workload", "nano-vllm", "--tensor-parallel", args.tensor_parallel,
                "--requests", str(args.requests), *(["--cut", str(args.cut)] if args.cut else [])]
    for shape in ("0.5b", "7b"):
        if shape in only:
            payload = bench(args, shape, workload, log)
            summary += workload_lines(shape, payload) if payload else [f"{shape}: failed"]
    if "72b" in only:
        highest = max(int(x) for x in args.tensor_parallel.split(","))
        layers = ["--layers", str(args.big_layers)] if args.big_layers else []
        payload = bench(args, "72b", ["--tensor-parallel", str(highest), "--batch", args.batches,
                                      "--context", str(args.context), "--steps",
                                      str(args.steps), *layers], log)
        summary += big_lines(payload) if payload else ["72b: failed"]
    log("== summary")
    for line in summary:
        log(line)
    return 0 if not any(line.endswith("failed") for line in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
