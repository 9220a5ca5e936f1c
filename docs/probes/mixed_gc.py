"""Python's garbage collections during `torchlet bench mixed`'s timed runs, the versions named in
one process in turn (v15 alone by default), each warmed up first as the bench does: how many of
each generation and their longest pause. A gen-2 collection over a few hundred thousand objects
stalls one step for tens of ms, so it is a candidate for a rare inter-token maximum. The
collector's work follows the host's objects, not the device's, so this runs on a CPU with the
model shrunk (its layers in PyTorch). `--frozen`: each timed run inside the benches'
frozen_heap (a full collection, then every object alive frozen), as they run it now.
`--workload`: nano-vllm's workload instead (bench gpu-workload's, 256 requests, v20 by default),
warmed up and run as run_job runs it.

    PYTHONPATH=. python docs/probes/mixed_gc.py [VERSION ...] [--frozen] [--workload]

About a minute a version on 2 cores (the workload, a minute and a half)."""
import argparse
import contextlib
import dataclasses
import gc
import time

import torch

import implementations
from torchlet.bench import mixed
from torchlet.bench.drive import run_steps, warm_up
from torchlet.bench.run import ModelSpec, build_engine, build_options, frozen_heap
from torchlet.bench.workloads import CPU_MODEL, nano_vllm_workload
from torchlet.contract import CHUNKED_PREFILL


def main():
    p = argparse.ArgumentParser()
    p.add_argument("versions", nargs="*")
    p.add_argument("--frozen", action="store_true")
    p.add_argument("--workload", action="store_true")
    wanted = p.parse_args()
    if wanted.workload:
        return workload(wanted.versions or ["v20_live_lanes"], wanted.frozen)
    wanted.versions = wanted.versions or ["v15_chunked_prefill"]
    args = argparse.Namespace(decoders=16, short_len=64, decode_tokens=512, long_prompts=16,
                              long_len=8192, long_tokens=4, every=16, budget=512)
    config = dataclasses.replace(CPU_MODEL, vocab_size=512, hidden_size=64, intermediate_size=128,
                                 num_heads=2, num_kv_heads=1, max_position=2 * args.long_len)
    checkpoint = ModelSpec(config=config, seed=0).checkpoint("cpu", torch.float32)
    shorts, longs = mixed.workload(args, config.vocab_size)
    gc.callbacks.append(timed)
    for name in wanted.versions:
        version = implementations.load(name)
        options = build_options(version, {"max_running": args.decoders + args.long_prompts})
        budget = version.option_for("max_step_tokens").name
        options[budget] = (args.budget if CHUNKED_PREFILL in version.capabilities
                           else args.long_len + args.decoders + args.long_prompts)
        engine = version.build(checkpoint, device="cpu", dtype=torch.float32, **options)
        mixed.warm_up(engine, args, shorts, longs, config.vocab_size, "cpu")
        with frozen_heap() if wanted.frozen else contextlib.nullcontext():
            tracked = len(gc.get_objects())
            pauses.clear()
            mixed.drive(engine, shorts, longs, args, "cpu")
        report(name, tracked, wanted.frozen)
        del engine  # as the bench drops each version's engine before the next


pauses, started = [], {}


def timed(phase, info):
    if phase == "start":
        started["at"] = time.perf_counter()
    else:
        pauses.append((info["generation"], (time.perf_counter() - started["at"]) * 1e3))


def report(name: str, tracked: int, frozen: bool) -> None:
    print(f"{name}: {tracked:,} objects tracked at the start of its timed run"
          f"{' (the rest frozen)' if frozen else ''}")
    for generation in (0, 1, 2):
        ms = [p for g, p in pauses if g == generation]
        print(f"  gen {generation}: {len(ms)} collections" + (
            f", longest {max(ms):.2f} ms, {sum(ms):.1f} ms in all" if ms else ""))


def workload(versions: list[str], frozen: bool) -> None:
    """nano-vllm's workload on each version, as run_job warms up and runs it (in this process)."""
    load = nano_vllm_workload()
    config = dataclasses.replace(CPU_MODEL, vocab_size=10240, hidden_size=64,
                                 intermediate_size=128, num_heads=2, num_kv_heads=1,
                                 max_position=4096)
    checkpoint = ModelSpec(config=config, seed=0).checkpoint("cpu", torch.float32)
    gc.callbacks.append(timed)
    for name in versions:
        engine, _ = build_engine(implementations.load(name), checkpoint, "cpu", torch.float32,
                                 {"max_running": load.num_requests}, load)
        warm_up(engine, load, True)
        with frozen_heap() if frozen else contextlib.nullcontext():
            tracked = len(gc.get_objects())
            pauses.clear()
            run_steps(engine, load, "cpu", False)
        report(name, tracked, frozen)
        del engine


if __name__ == "__main__":
    main()
