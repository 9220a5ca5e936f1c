"""`torchlet bench tp`: what tensor parallelism costs and buys, per rank.

For each degree N (1 and 2 by default), the newest version with the tensor_parallel capability
is built on N ranks (torchlet.parallel: this process and N - 1 started here; gloo on a CPU, NCCL
on GPUs) over the same seeded random model. Each rank's bytes of weights and of K/V come from the
ranks themselves (shards); the decode step is timed on rank 0 over `--batch` requests
of `--context` prompt tokens, from step() to its tokens on the host.

On a 2-core CPU this says nothing about speed: the ranks share the cores, and a collective over
loopback costs more than the tiny model's maths. The bytes per rank are the point there."""
from __future__ import annotations

import time

import torch

from torchlet.contract import MAX_LEN, MAX_RUNNING, TENSOR_PARALLEL, GenerationParams

from .run import ModelSpec


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


def measure(args, log) -> tuple[dict, str]:
    from torchlet.parallel import BuildSpec, Ranks

    from .commands import device_of, dtype_of, ints, select_versions, shape_of

    device = device_of(args)
    dtype = dtype_of(args, device)
    config = shape_of(args, device)
    version = select_versions(args, device, TENSOR_PARALLEL, newest=True, kernels_off=True)[-1]
    options = version.options_by_role({MAX_LEN: args.context + args.steps + 8,
                                       MAX_RUNNING: args.batch})
    if not device.startswith("cuda"):
        options.update({o.name: False for o in version.options
                        if o.name in ("use_graphs", "overlap")})
    threads = args.threads or 1
    rows = []
    for world in ints(args.tensor_parallel, (1, 2)):
        spec = BuildSpec(version.name, ModelSpec(config=config, seed=0), device,
                         str(dtype).removeprefix("torch."), options, args.impl_root, False, threads)
        log(f"{version.name} on {world} rank(s), {device} {spec.dtype}, options {options}")
        with Ranks(world, device) as ranks:
            torch.set_num_threads(threads)
            from torchlet.cli import kernels_off
            with kernels_off(device, interpret=False):  # Triton layers choose at build
                engine = ranks.build(spec)
                memory = engine.shards()
                ms = step_ms(engine, args.batch, args.context, args.steps, config.vocab_size,
                             device)
        for rank, held in enumerate(memory):
            rows.append({"tensor_parallel": world, "rank": rank,
                         "weights_mib": held["weights"] / 2 ** 20,
                         "kv_mib": held["kv"] / 2 ** 20, "step_ms": ms if rank == 0 else None})
    describe = (f"{version.name}, a seeded random {config.num_layers}-layer model (hidden "
                f"{config.hidden_size}, {config.num_heads} heads on {config.num_kv_heads} KV "
                f"heads, vocabulary {config.vocab_size}); decode step of {args.batch} requests "
                f"past {args.context}-token prompts, median of {args.steps}")
    return {"workload": {"describe": describe}, "rows": rows}, device
