"""What each `torchlet bench` subcommand does (the parser lives in bench.py)."""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from torchlet.contract import CONTINUOUS_BATCHING, REQUEST_STATES, TorchletError


def command_line(args) -> str:
    """The command, with every option that differs from its default: what produced a result."""
    parts = ["torchlet", "bench", args.bench]
    for action in args.bench_parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        if isinstance(value, bool):
            parts.append(flag)
        elif isinstance(value, list):
            for v in value:
                parts += [flag, str(v)]
        else:
            parts += [flag, str(value)]
    return shlex.join(parts)


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def ints(text: str | None, default) -> list[int]:
    return [int(x) for x in text.split(",")] if text else list(default)


def device_of(args) -> str:
    import torch

    device = getattr(args, "device", None) or ("cuda" if torch.cuda.is_available() else "cpu")
    if not device.startswith("cuda"):
        # must be set before any @triton.jit runs, i.e. before versions are imported
        os.environ.setdefault("TRITON_INTERPRET", "1")
        torch.set_num_threads(getattr(args, "threads", None) or 1)
    elif getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    return device


def dtype_of(args, device: str):
    import torch

    name = getattr(args, "dtype", "auto")
    if name == "auto":
        name = "bfloat16" if device.startswith("cuda") else "float32"
    return getattr(torch, name)


def shape_of(args, device: str):
    from .bench_workloads import CPU_MODEL, QWEN25_05B

    shape = getattr(args, "model_shape", None) or ("qwen2.5-0.5b" if device.startswith("cuda")
                                                  else "cpu")
    return QWEN25_05B if shape == "qwen2.5-0.5b" else CPU_MODEL


def rates(args) -> tuple[float, float]:
    from .bench_floor import H200_BANDWIDTH, H200_BF16_FLOPS
    return args.bandwidth or H200_BANDWIDTH, args.flops or H200_BF16_FLOPS


def select_versions(args, device: str, need: str | None = None, newest: bool = False):
    """Versions named by --versions, or by default every version that can build an engine, has
    `need`, and runs natively on `device` (on a CPU, Triton versions would run in the
    interpreter, which is for specs)."""
    import implementations
    from .bench_run import load_version

    if args.versions:
        return [load_version(n.strip(), args.impl_root) for n in args.versions.split(",")]
    root = Path(args.impl_root).resolve() if args.impl_root else implementations.REFERENCE_ROOT
    found = [v for v in implementations.discover(root)
             if hasattr(v.package, "build") and (need is None or need in v.capabilities)
             and (device.startswith("cuda") or not v.uses_triton)]
    if not found:
        raise TorchletError(f"no version fits this benchmark on {device}")
    return found[-1:] if newest else found


def wishes_of(args, default_running: int | None) -> dict:
    running = args.max_running or default_running
    wishes = {"max_running": running, "max_decode_slots": running,
              "max_step_tokens": args.max_step_tokens}
    for item in args.build_opt:
        name, _, value = item.partition("=")
        wishes[name.strip()] = int(value)
    return wishes


def report(kind: str, args, payload: dict, device: str) -> None:
    from .bench_report import save, text_table

    print(text_table(kind, payload["rows"]))
    path = save(kind, payload, args.out, command_line(args), device)
    log(f"wrote {path} and {path.with_suffix('.png')}")


def run_cpu(args) -> int:
    from .bench_run import Job, ModelSpec, run_jobs
    from .bench_workloads import CPU_MODEL, cpu_workload

    device_of(args)  # sets the Triton interpreter and the threads before versions load
    versions = select_versions(args, "cpu")
    if args.model:
        from torchlet.checkpoints import load_hf_dir
        model, config = ModelSpec(hf_dir=str(Path(args.model).resolve())), load_hf_dir(args.model).config
    else:
        model, config = ModelSpec(config=CPU_MODEL, seed=0), CPU_MODEL
    workload = cpu_workload(args.requests, args.seed, vocab_size=config.vocab_size)
    log(workload.describe())
    jobs = [Job(v.name, args.impl_root, model, workload, "cpu", "float32",
                wishes_of(args, args.requests), args.generate_batch, not args.quiet, args.threads)
            for v in versions]
    rows = run_jobs(jobs, isolate=not args.in_process, log=log)
    report("cpu", args, {"workload": workload_info(workload), "model": model_info(config),
                         "rows": rows}, "cpu")
    return 0


def workload_info(workload) -> dict:
    return {"name": workload.name, "requests": workload.num_requests,
            "prompt_tokens": workload.prompt_tokens, "output_tokens": workload.output_tokens,
            "describe": workload.describe()}


def model_info(config) -> dict:
    from dataclasses import asdict
    return {k: v for k, v in asdict(config).items() if k != "eos_token_ids"}


def run_gpu_workload(args) -> int:
    from .bench_floor import physical_floor
    from .bench_run import Job, ModelSpec, run_jobs
    from .bench_workloads import Workload, nano_vllm_workload

    device = device_of(args)
    dtype = dtype_of(args, device)
    config = shape_of(args, device)
    workload = nano_vllm_workload().head(args.requests)
    if config.vocab_size <= 10000:  # a smoke run on the small CPU model: fold ids into its vocab
        workload = Workload(workload.name, tuple(tuple(t % config.vocab_size for t in p)
                                                 for p in workload.prompts), workload.output_lens)
    log(workload.describe())
    floor = physical_floor(config, workload, *rates(args), dtype_bytes=dtype.itemsize)
    versions = select_versions(args, device, CONTINUOUS_BATCHING)
    model = ModelSpec(config=config, seed=0)
    jobs = [Job(v.name, args.impl_root, model, workload, device, str(dtype).replace("torch.", ""),
                wishes_of(args, args.requests), False, not args.quiet) for v in versions]
    rows = run_jobs(jobs, isolate=False, log=log)
    if args.hf_baseline:
        from .bench_hf import hf_generate_baseline
        try:
            hf = hf_generate_baseline(model.checkpoint(device, dtype), workload, device, dtype,
                                      args.hf_batch_size, not args.quiet)
            log(f"HF generate: {hf['wall_s']:.2f} s, {hf['output_tok_s']:.1f} output tok/s")
        except Exception as e:  # noqa: BLE001
            hf = {"version": "HF transformers generate", "error": f"{type(e).__name__}: {e}"}
        rows.append(hf)
    hf_wall = next((r["wall_s"] for r in rows if r["version"].startswith("HF") and "wall_s" in r),
                   None)
    for row in rows:
        if "wall_s" in row:
            row["pct_floor"] = 100 * floor.seconds / row["wall_s"]
            row["vs_hf"] = hf_wall / row["wall_s"] if hf_wall else None
    print("\n".join(floor.lines()))
    report("gpu-workload", args, {"workload": workload_info(workload), "model": model_info(config),
                                  "floor": floor_info(floor), "rows": rows}, device)
    return 0


def floor_info(floor) -> dict:
    from dataclasses import asdict
    return {**asdict(floor), "seconds": floor.seconds, "lines": floor.lines()}


def run_decode(args) -> int:
    from .bench_micro import decode_step_bench
    from .bench_workloads import random_checkpoint

    device = device_of(args)
    dtype = dtype_of(args, device)
    cpu = not device.startswith("cuda")
    config = shape_of(args, device)
    checkpoint = random_checkpoint(config, 0, device=device, dtype=dtype)
    bandwidth, _ = rates(args)
    rows = []
    for version in select_versions(args, device, REQUEST_STATES, newest=True):
        for batch in ints(args.batches, (1, 4) if cpu else (1, 8, 64, 256)):
            for context in ints(args.contexts, (32, 128) if cpu else (128, 1024, 4096)):
                try:
                    row = decode_step_bench(version, checkpoint, batch, context, device=device,
                                            dtype=dtype, wishes=wishes_of(args, None),
                                            steps=args.steps, warmup=args.warmup,
                                            bandwidth=bandwidth)
                    log(f"{version.name} B={batch} ctx={context}: {row['ms_per_step']:.3f} ms")
                except Exception as e:  # noqa: BLE001
                    row = {"version": version.name, "batch": batch, "context": context,
                           "error": f"{type(e).__name__}: {e}"}
                    log(f"{version.name} B={batch} ctx={context}: failed: {row['error']}")
                rows.append(row)
    report("decode", args, {"model": model_info(config), "bandwidth": bandwidth, "rows": rows},
           device)
    return 0


def run_kernel(args) -> int:
    import importlib.util

    from .bench_micro import kernel_bench

    device = device_of(args)
    dtype = dtype_of(args, device)
    cpu = not device.startswith("cuda")
    config = shape_of(args, device)
    bandwidth, _ = rates(args)
    if args.versions:
        versions = select_versions(args, device)
    else:
        import implementations
        versions = [v for v in implementations.discover()
                    if importlib.util.find_spec(v.package.__name__ + ".paged_kernels")][-1:]
    rows = []
    for version in versions:
        for batch in ints(args.batches, (1, 4) if cpu else (1, 8, 64, 256)):
            for context in ints(args.contexts, (32, 128) if cpu else (128, 1024, 4096)):
                row = kernel_bench(version, batch, context, heads=config.num_heads,
                                   kv_heads=config.num_kv_heads, head_dim=config.head_dim,
                                   device=device, dtype=dtype, block_size=args.block_size,
                                   bandwidth=bandwidth, iters=args.iters)
                log(f"{version.name} B={batch} ctx={context}: paged {row['paged_gb_s']:.1f} GB/s, "
                    f"SDPA {row['sdpa_gb_s']:.1f} GB/s")
                rows.append(row)
    report("kernel", args, {"model": model_info(config), "bandwidth": bandwidth, "rows": rows},
           device)
    return 0


def run_floor(args) -> int:
    from .bench_floor import physical_floor
    from .bench_workloads import nano_vllm_workload

    workload = nano_vllm_workload()
    floor = physical_floor(shape_of(args, "cuda"), workload, *rates(args))
    print(workload.describe())
    print("\n".join(floor.lines()))
    return 0


def run_report(args) -> int:
    from .bench_doc import write_doc

    path = write_doc(Path(args.results), Path(args.doc) if args.doc else None)
    log(f"wrote {path}")
    return 0
