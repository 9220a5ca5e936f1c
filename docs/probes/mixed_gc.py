"""Python's garbage collections during `torchlet bench mixed`'s measured run (v15, its warm-up
first, as the bench runs them): how many of each generation and their longest pause. A gen-2
collection over a few hundred thousand objects can stall one step for tens of ms, so it is a
candidate for a rare inter-token maximum. The collector's work follows the host's objects, not
the device's, so this runs on a CPU with the model shrunk (its layers in PyTorch).

    PYTHONPATH=. python docs/probes/mixed_gc.py

About a minute on 2 cores."""
import argparse
import dataclasses
import gc
import time

import torch

import implementations
from torchlet.bench import mixed
from torchlet.bench.run import ModelSpec, build_options
from torchlet.bench.workloads import CPU_MODEL


def main():
    version = implementations.load("v15_chunked_prefill")
    args = argparse.Namespace(decoders=16, short_len=64, decode_tokens=512, long_prompts=16,
                              long_len=8192, long_tokens=4, every=16, budget=512)
    config = dataclasses.replace(CPU_MODEL, vocab_size=512, hidden_size=64, intermediate_size=128,
                                 num_heads=2, num_kv_heads=1, max_position=2 * args.long_len)
    checkpoint = ModelSpec(config=config, seed=0).checkpoint("cpu", torch.float32)
    options = build_options(version, {"max_running": args.decoders + args.long_prompts})
    options["max_step_tokens"] = args.budget
    engine = version.build(checkpoint, device="cpu", dtype=torch.float32, **options)
    shorts, longs = mixed.workload(args, config.vocab_size)
    warm = [tuple((t + 1) % config.vocab_size for t in longs[0])]
    mixed.drive(engine, shorts[:1], warm, mixed.argparse_like(args, decode_tokens=4, every=1),
                "cpu")
    pauses, started = [], {}

    def timed(phase, info):
        if phase == "start":
            started["at"] = time.perf_counter()
        else:
            pauses.append((info["generation"], (time.perf_counter() - started["at"]) * 1e3))

    print(f"thresholds {gc.get_threshold()}, objects tracked {len(gc.get_objects()):,}")
    gc.callbacks.append(timed)
    mixed.drive(engine, shorts, longs, args, "cpu")
    gc.callbacks.remove(timed)
    for generation in (0, 1, 2):
        ms = [p for g, p in pauses if g == generation]
        print(f"gen {generation}: {len(ms)} collections" + (
            f", longest {max(ms):.2f} ms, {sum(ms):.1f} ms in all" if ms else ""))


if __name__ == "__main__":
    main()
