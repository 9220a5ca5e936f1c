"""What each `torchlet bench` subcommand does (the parser lives in __init__.py)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from torchlet.contract import (CONTINUOUS_BATCHING, PAGED_DECODE_ATTENTION, REQUEST_STATES,
                               TorchletError)

from .flags import (anchors_on, cells, device_of, dtype_of, named_of, rates, select_versions,
                    shape_of, wishes_of)


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
        if isinstance(value, bool):  # --anchors / --no-anchors: the one that gives this value
            parts.append(next((o for o in action.option_strings
                               if o.startswith("--no-") != value), flag))
        elif isinstance(value, list):
            for v in value:
                parts += [flag, str(v)]
        else:
            parts += [flag, str(value)]
    return shlex.join(parts)


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def report(kind: str, args, payload: dict, device: str) -> None:
    from .report import save, text_table

    print(text_table(kind, payload["rows"]))
    path = save(kind, payload, args.out, command_line(args), device)
    log(f"wrote {path} and {path.with_suffix('.png')}")


def run_main_job(args) -> int:
    from .main_job import measure

    payload, device = measure(args, log)
    report("main-job", args, payload, device)
    return 0


def run_long_prompt(args) -> int:
    from .long_prompt import measure

    payload, device = measure(args, log)
    report("long-prompt", args, payload, device)
    return 0


def run_cpu(args) -> int:
    from .run import Job, ModelSpec, run_jobs
    from .workloads import CPU_MODEL, cpu_workload, with_shared_prefix

    device_of(args)  # sets the Triton interpreter and the threads before versions load
    versions = select_versions(args, "cpu", kernels_off=True)  # run_job turns them off
    if args.model:
        from torchlet.checkpoints import load_hf_dir
        model, config = ModelSpec(hf_dir=str(Path(args.model).resolve())), load_hf_dir(args.model).config
    else:
        model, config = ModelSpec(config=CPU_MODEL, seed=0), CPU_MODEL
    workload = cpu_workload(args.requests, args.seed, vocab_size=config.vocab_size)
    workload = with_shared_prefix(workload, args.shared_prefix, args.seed, config.vocab_size,
                                  config.max_position)
    log(workload.describe())
    jobs = [Job(v.name, args.impl_root, model, workload, "cpu", "float32",
                wishes=wishes_of(args, args.requests), named=named_of(args),
                generate_batch=args.generate_batch, progress=not args.quiet, threads=args.threads)
            for v in versions]
    rows = run_jobs(jobs, isolate=not args.in_process, log=log)
    report("cpu", args, {"workload": workload_info(workload), "model": model_info(config),
                         "rows": rows}, "cpu")
    return 0


def workload_info(workload) -> dict:
    return {"name": workload.name, "requests": workload.num_requests,
            "prompt_tokens": workload.prompt_tokens, "output_tokens": workload.output_tokens,
            "shared_prefix": workload.shared_prefix, "describe": workload.describe()}


def model_info(config) -> dict:
    from dataclasses import asdict
    return {k: v for k, v in asdict(config).items() if k != "eos_token_ids"}


# A workload run on another model shape than the default's: a result of its own, so that it
# does not replace the default shape's (issue 48's Qwen3-0.6B target reads it).
SHAPE_KINDS = {"qwen3-0.6b": "gpu-workload-qwen3"}


def run_gpu_workload(args) -> int:
    from .floor import physical_floor
    from .run import Job, ModelSpec, median_runs, run_jobs
    from .workloads import NANO_VLLM, Workload, nano_vllm_workload, with_shared_prefix

    if args.repeats is not None and args.repeats < 1:
        raise TorchletError(f"--repeats must be at least 1, got {args.repeats}")
    device = device_of(args)
    dtype = dtype_of(args, device)
    config = shape_of(args, device)
    workload = nano_vllm_workload().head(args.requests)
    if config.vocab_size <= 10000:  # a smoke run on the small CPU model: fold ids into its vocab
        workload = Workload(workload.name, tuple(tuple(t % config.vocab_size for t in p)
                                                 for p in workload.prompts), workload.output_lens)
    workload = with_shared_prefix(workload, args.shared_prefix, NANO_VLLM["seed"],
                                  min(config.vocab_size, NANO_VLLM["max_id"] + 1),
                                  config.max_position)
    log(workload.describe())
    floor = physical_floor(config, workload, *rates(args), dtype_bytes=dtype.itemsize)
    versions = select_versions(args, device, CONTINUOUS_BATCHING)
    repeats = args.repeats or (3 if device.startswith("cuda") else 1)
    model = ModelSpec(config=config, seed=0)
    jobs = [Job(v.name, args.impl_root, model, workload, device, str(dtype).replace("torch.", ""),
                wishes=wishes_of(args, args.requests), named=named_of(args),
                progress=not args.quiet) for v in versions]
    # interleaved, so that a drift of the machine's speed reaches every version alike
    rows = median_runs(run_jobs(jobs * repeats, isolate=False, log=log))
    anchors = workload_anchors(args, model, workload, device, dtype) \
        if anchors_on(args, device) else None
    if args.hf_baseline:
        from .hf import hf_generate_baseline
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
    payload = {"workload": workload_info(workload), "model": model_info(config),
               "floor": floor_info(floor), "rows": rows}
    if anchors:
        from .anchors import workload_anchor_lines
        payload["anchors"] = anchors
        print("\n".join(workload_anchor_lines(anchors, rows)))
    kind = ("gpu-workload-quantized" if args.quantize
            else SHAPE_KINDS.get(getattr(args, "model_shape", None), "gpu-workload"))
    report(kind, args, payload, device)
    return 0


def workload_anchors(args, model, workload, device: str, dtype) -> dict:
    """The anchors at the workload's average decode step, in this process; its error if not."""
    from .anchors import anchor_cell, anchor_summary, workload_cell

    batch, context = workload_cell(workload, model.config)
    try:
        row = anchor_cell(model.checkpoint(device, dtype), batch, context, device=device,
                          dtype=dtype, bandwidth=rates(args)[0], compile_mode=args.compile)
    except Exception as e:  # noqa: BLE001  (the workload's table stands without its anchors)
        row = {"batch": batch, "context": context, "error": f"{type(e).__name__}: {e}"}
    log(anchor_summary(row))
    return row


def floor_info(floor) -> dict:
    from dataclasses import asdict
    return {**asdict(floor), "seconds": floor.seconds, "lines": floor.lines()}


def run_mixed(args) -> int:
    from .mixed import measure, summary

    cuda = device_of(args).startswith("cuda")
    defaults = {"decode_tokens": (512, 64), "long_len": (8192, 512), "every": (16, 4),
                "budget": (2048, 64)}
    for name, (gpu, cpu) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, gpu if cuda else cpu)
    payload, device = measure(args, log)
    # Each device has its section in the doc: the CPU's tiny model and the GPU's answer apart.
    report("mixed" if cuda else "mixed-cpu", args, payload, device)
    print(summary(payload["rows"]))
    return 0


def run_tp(args) -> int:
    from .tp import measure

    payload, device = measure(args, log)
    report("tp", args, payload, device)
    return 0


def decode_model(args):
    """What a decode step is timed on: the device, dtype, model shape, its random checkpoint
    there, and the bandwidth."""
    from .workloads import random_checkpoint

    device = device_of(args)
    dtype = dtype_of(args, device)
    config = shape_of(args, device)
    return (device, dtype, config, random_checkpoint(config, 0, device=device, dtype=dtype),
            rates(args)[0])


def run_decode(args) -> int:
    from .anchors import anchor_columns
    from .micro import decode_step_bench

    device, dtype, config, checkpoint, bandwidth = decode_model(args)
    anchored: dict[tuple[int, int], dict] = {}  # one anchor per cell, whatever the versions
    rows = []
    for version in select_versions(args, device, REQUEST_STATES, newest=True):
        for batch, context in cells(args, device):
            try:
                row = decode_step_bench(version, checkpoint, batch, context, device=device,
                                        dtype=dtype, wishes=wishes_of(args, None),
                                        named=named_of(args),
                                        steps=args.steps, warmup=args.warmup,
                                        bandwidth=bandwidth)
                log(f"{version.name} B={batch} ctx={context}: {row['ms_per_step']:.3f} ms")
            except Exception as e:  # noqa: BLE001
                row = {"version": version.name, "batch": batch, "context": context,
                       "error": f"{type(e).__name__}: {e}"}
                log(f"{version.name} B={batch} ctx={context}: failed: {row['error']}")
            if anchors_on(args, device) and "error" not in row:
                if (batch, context) not in anchored:
                    anchored[batch, context] = one_anchor(args, checkpoint, batch, context,
                                                          device, dtype, bandwidth)
                row.update(anchor_columns(anchored[batch, context]))
            rows.append(row)
    report("decode-quantized" if args.quantize else "decode", args,
           {"model": model_info(config), "bandwidth": bandwidth, "rows": rows}, device)
    return failed(rows)


def one_anchor(args, checkpoint, batch, context, device, dtype, bandwidth) -> dict:
    """The anchors of one cell (anchors.anchor_cell), or the cell with its error."""
    from .anchors import anchor_cell, anchor_summary

    try:
        row = anchor_cell(checkpoint, batch, context, device=device, dtype=dtype,
                          bandwidth=bandwidth, compile_mode=args.compile,
                          steps=args.steps, warmup=args.warmup)
    except Exception as e:  # noqa: BLE001  (a failed anchor leaves its cell's row standing)
        row = {"batch": batch, "context": context, "error": f"{type(e).__name__}: {e}"}
    log(anchor_summary(row))
    return row


def run_anchors(args) -> int:
    device, dtype, config, checkpoint, bandwidth = decode_model(args)
    rows = [one_anchor(args, checkpoint, batch, context, device, dtype, bandwidth)
            for batch, context in cells(args, device)]
    report("anchors", args, {"model": model_info(config), "bandwidth": bandwidth, "rows": rows},
           device)
    return failed(rows)


def failed(rows: list[dict]) -> int:
    """1, with a line that says so, when a cell failed (its row holds the error); else 0."""
    bad = sum("error" in r for r in rows)
    if bad:
        log(f"{bad} of {len(rows)} cells failed; their rows hold the error")
    return int(bad > 0)


def run_kernel(args) -> int:
    from .micro import kernel_bench

    device = device_of(args)
    dtype = dtype_of(args, device)
    config = shape_of(args, device)
    bandwidth, _ = rates(args)
    if args.versions:
        versions = select_versions(args, device)
    else:
        versions = [newest_kernel(args.impl_root, PAGED_DECODE_ATTENTION)]
    rows = []
    for version in versions:
        for batch, context in cells(args, device):
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


def newest_kernel(impl_root: str | None, name: str):
    """The version that wrote the kernel the newest version declares under `name` (later ones
    may only inherit it), even where it needs Triton's interpreter."""
    import implementations

    root = Path(impl_root).resolve() if impl_root else implementations.REFERENCE_ROOT
    found = [v for v in implementations.discover(root) if v.has_kernel(name)]
    if not found:
        raise TorchletError(f"no version declares the kernel {name}")
    return next(v for v in found if v.kernel(name) is found[-1].kernel(name))


def run_floor(args) -> int:
    from .floor import physical_floor
    from .workloads import nano_vllm_workload

    workload = nano_vllm_workload()
    floor = physical_floor(shape_of(args, "cuda"), workload, *rates(args))
    print(workload.describe())
    print("\n".join(floor.lines()))
    return 0


def run_speculative(args) -> int:
    """`torchlet bench speculative`; exit status 1 where exact acceptance changed a token."""
    from .speculative import check_lines, measure

    payload, device = measure(args, log)
    lines, held = check_lines(payload["rows"])
    payload["checks"] = lines
    kind = "speculative-gpu" if device.startswith("cuda") else "speculative"
    report(kind + ("-invariant" if args.batch_invariant else ""), args, payload, device)
    print("\n".join(lines))
    return 0 if held else 1


def run_structured(args) -> int:
    """`torchlet bench structured`; exit status 1 where a constrained answer did not validate."""
    from .structured import measure

    payload, device = measure(args, log)
    # each device has its section in the doc
    report("structured-gpu" if device.startswith("cuda") else "structured", args, payload, device)
    rows = payload["rows"]
    return 0 if all(r["valid"] == r["answers"] for r in rows) else 1


def run_report(args) -> int:
    from .doc import write_doc

    path = write_doc(Path(args.results), Path(args.doc) if args.doc else None)
    log(f"wrote {path}")
    return 0


def run_batching(args) -> int:
    """`torchlet bench batching`: the same requests through one server, one after another,
    then all at once."""
    from . import report
    from .batching import run_batching_bench

    row, banner, described = run_batching_bench(args)
    payload = {"rows": [row], "server": banner, "workload": {"describe": described}}
    device = args.device or ("cuda" if "on cuda" in banner else "cpu")
    path = report.save("batching", payload, args.out, command_line(args), device)
    print(report.text_table("batching", [row]))
    print(f"wrote {path}")
    return 0


def run_serve(args) -> int:
    """`torchlet bench serve`: the server in a child process, a Poisson stream at each rate."""
    from . import report
    from .serve import run_serve_bench

    rows, banner, described = run_serve_bench(args)
    payload = {"rows": rows, "server": banner, "workload": {"describe": described}}
    device = args.device or ("cuda" if "on cuda" in banner else "cpu")
    kind = "serve-gpu" if "on cuda" in banner else "serve"  # each has its section in the doc
    path = report.save(kind, payload, args.out, command_line(args), device)
    print(report.text_table(kind, rows))
    print(f"wrote {path}")
    return 0
