"""`torchlet bench tp`: what tensor parallelism costs and buys, per rank.

For each degree N (1 and 2 by default), the newest version with the tensor_parallel capability
is built on N ranks (torchlet.parallel: this process and N - 1 started here; gloo on a CPU, NCCL
on GPUs) over the same seeded random model shape, each rank drawing only its own shard
(sharded.py: a model too big for one device is never whole anywhere). Before a build, the bytes
each rank will hold are worked out from the version's own sharding and checked against the
device's memory. Each rank's bytes of weights and of K/V come from the ranks themselves
(shards), and its peak memory from each rank after the engine closes. Then, on rank 0, either
the decode step is timed over `--batch` requests of `--context` prompt tokens, from step() to
its tokens on the host, or with `--workload nano-vllm` nano-vllm's requests are run through.

On a 2-core CPU this says nothing about speed: the ranks share the cores, and a collective over
loopback costs more than the tiny model's maths. The bytes per rank are the point there."""
from __future__ import annotations

import gc
import os
import time

import torch

from torchlet.contract import (BLOCK_SIZE, MAX_RUNNING, MAX_STEP_TOKENS, NUM_BLOCKS,
                               TENSOR_PARALLEL, GenerationParams, TorchletError)

from .workloads import Workload

GIB = 2 ** 30
H200_MEMORY = 139 * GIB  # what one H200 gives torch, where there is no GPU to ask
# NVLink multicast off in NCCL, PyTorch and NVSHMEM, in this process and the ranks it starts
# (they inherit the environment): on the device machines it can take shared GPUs out of service.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


def step_ms(engine, batch: int, context: int, steps: int, vocab: int, device: str) -> float:
    """Median wall time of `steps` decode steps of `batch` requests past their prompts."""
    g = torch.Generator().manual_seed(0)
    params = GenerationParams(max_new_tokens=steps + 2, ignore_eos=True)
    ids = [engine.add_request(torch.randint(3, vocab, (context,), generator=g).tolist(), params)
           for _ in range(batch)]
    while any(not engine.output(i).tokens for i in ids):
        engine.step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    for i in ids:
        engine.abort(i)
    return sorted(times)[len(times) // 2]


def sizes(version, args, batches: list[int], workload: Workload | None, named: dict) -> dict:
    """Build options: the workload's, or room for the largest batch's prompts and steps."""
    from .run import build_options

    if workload is None:  # the decode steps' requests, as a workload only to size the pool
        biggest = max(batches)
        workload = Workload("steps", ((0,) * args.context,) * biggest,
                            (args.steps + 8,) * biggest)
    wishes = {MAX_RUNNING: args.max_running or workload.num_requests,
              MAX_STEP_TOKENS: args.max_step_tokens}
    return build_options(version, wishes, named, workload)


def check_fit(plans: list[dict], device: str, log) -> None:
    """Log each rank's planned bytes; on a GPU, refuse a plan its device cannot hold."""
    cuda = device.startswith("cuda")
    total = torch.cuda.get_device_properties(0).total_memory if cuda else H200_MEMORY
    against = f"{total / GIB:.1f} GiB" if cuda else f"an H200's {total / GIB:.1f} GiB"
    for rank, p in enumerate(plans):
        need = p["weights"] + p["packing"] + p["kv"]
        log(f"rank {rank} will hold {p['weights'] / GIB:.4g} GiB of weights and "
            f"{p['kv'] / GIB:.4g} GiB of K/V, {need / GIB:.4g} GiB at the build's peak with "
            f"{p['packing'] / GIB:.4g} GiB of packing copies: "
            f"{'fits in' if need < total else 'MORE than'} {against}")
        if need >= total and cuda:
            raise TorchletError(f"rank {rank} would need {need / GIB:.1f} GiB, more than its "
                                f"GPU's {total / GIB:.1f} GiB: more ranks, or fewer --layers")


def measure(args, log) -> tuple[dict, str]:
    from torchlet.parallel import BuildSpec, Ranks
    from torchlet.running import kernels_off

    from .flags import device_of, dtype_of, ints, named_of, rates, select_versions, shape_of
    from .drive import run_steps, warm_up
    from .sharded import ShardedRandomModel, gather_peaks, peak_bytes, planned_bytes
    from .workloads import nano_vllm_workload, scaled

    for name, value in NO_MULTICAST.items():
        os.environ.setdefault(name, value)
    device = device_of(args)
    dtype = dtype_of(args, device)
    config = scaled(shape_of(args, device), args.layers, args.scale)
    bandwidth, _ = rates(args)
    version = select_versions(args, device, TENSOR_PARALLEL, newest=True, kernels_off=True)[-1]
    batches = ints(args.batch, (4,))
    workload = None
    if args.workload:
        workload = nano_vllm_workload().head(args.requests)
        if args.cut:
            workload = workload.cut(args.cut, config.vocab_size)
    options = sizes(version, args, batches, workload, named_of(args))
    if not device.startswith("cuda"):
        options.update({o.name: False for o in version.options
                        if o.name in ("use_graphs", "overlap")})
    kv_tokens = (options[version.option_for(NUM_BLOCKS).name]
                 * options.get(version.option_for(BLOCK_SIZE).name,
                               version.option_for(BLOCK_SIZE).default))
    threads = args.threads or 1
    rows = []
    for world in ints(args.tensor_parallel, (1, 2)):
        check_fit(planned_bytes(version, config, world, dtype, kv_tokens), device, log)
        spec = BuildSpec(version.name, ShardedRandomModel(config, seed=0), device,
                         str(dtype).removeprefix("torch."), options, args.impl_root, False, threads)
        log(f"{version.name} on {world} rank(s), {device} {spec.dtype}, options {options}")
        with Ranks(world, device, after=gather_peaks) as ranks:
            torch.set_num_threads(threads)
            peak_bytes()  # rank 0's count starts here (the others' start with their process)
            with kernels_off(device, interpret=False):  # Triton layers choose at build
                engine = ranks.build(spec)
                memory = engine.shards()
                if workload is not None:
                    warm_up(engine, workload, stepwise=True)
                    ran = run_steps(engine, workload, device, not args.quiet)
                else:
                    ran = {b: step_ms(engine, b, args.context, args.steps, config.vocab_size,
                                      device) for b in batches}
            ranks.close_engine()
            peaks = gather_peaks()
            del engine
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        rows += rows_of(world, memory, peaks, ran, workload, bandwidth)
        log(f"TP={world}: " + ("; ".join(f"B={b} {ms:.2f} ms" for b, ms in ran.items())
                               if workload is None else
                               f"{ran['wall_s']:.2f} s, {ran['output_tok_s']:.1f} output tok/s"))
    what = (workload.describe() if workload is not None else
            f"decode step of {'/'.join(map(str, batches))} requests past {args.context}-token "
            f"prompts, median of {args.steps}")
    describe = (f"{version.name}, a seeded random {config.num_layers}-layer model (hidden "
                f"{config.hidden_size}, {config.num_heads} heads on {config.num_kv_heads} KV "
                f"heads, intermediate {config.intermediate_size}, vocabulary "
                f"{config.vocab_size}), {spec.dtype}; {what}")
    peak = ("torch.cuda.max_memory_allocated of each rank, build and run"
            if device.startswith("cuda")
            else "each rank process's peak RSS (rank 0's since its start)")
    return {"workload": {"describe": describe, "peak_memory": peak, "bandwidth": bandwidth},
            "rows": rows}, device


def rows_of(world, memory, peaks, ran, workload, bandwidth) -> list[dict]:
    """One row a rank (a rank and batch, for decode steps): its bytes, peak and weight-read
    floor; rank 0's rows also its times."""
    rows = []
    for rank, (held, peak) in enumerate(zip(memory, peaks)):
        base = {"tensor_parallel": world, "rank": rank, "weights_mib": held["weights"] / 2 ** 20,
                "kv_mib": held["kv"] / 2 ** 20, "peak_mib": peak / 2 ** 20,
                "floor_ms": held["weights"] / bandwidth * 1e3}
        if workload is not None:
            rows.append({**base, **({"wall_s": ran["wall_s"], "output_tokens": ran["output_tokens"],
                                     "output_tok_s": ran["output_tok_s"]} if rank == 0 else {})})
            continue
        for batch, ms in ran.items():
            rows.append({**base, "batch": batch, "step_ms": ms if rank == 0 else None,
                         "decode_tok_s": 1e3 * batch / ms if rank == 0 else None})
    return rows
