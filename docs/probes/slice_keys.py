"""Which slice-graph buckets `torchlet bench mixed` reaches, and which of them its warm-up has not
captured: a bucket new to the run is a capture (a stall) in the measured window, unless a
captured graph covers it. No GPU needed: the buckets follow from the scheduler's slices alone, so
this runs v15 on a CPU with a model far smaller than the bench's, its layers in PyTorch, and
reads the (rows, requests, context bound) key of each slice pass from v15's SliceGraphs.key.

    PYTHONPATH=. python docs/probes/slice_keys.py [--budget 512 --long-len 8192 --every 16]

Takes about a minute on 2 cores for the defaults (16 decoders, 16 prompts of 8,192 tokens)."""
import argparse
import dataclasses

import torch

import implementations
from torchlet.bench import mixed
from torchlet.bench.run import ModelSpec, build_options
from torchlet.bench.workloads import CPU_MODEL

VERSION = implementations.load("v15_chunked_prefill")
SliceGraphs = VERSION.package.SliceGraphs
Runner = VERSION.package.ChunkedRunner


def main():
    p = argparse.ArgumentParser()
    for name, default in (("budget", 512), ("decoders", 16), ("short-len", 64),
                          ("decode-tokens", 512), ("long-prompts", 16), ("long-len", 8192),
                          ("long-tokens", 4), ("every", 16)):
        p.add_argument(f"--{name}", type=int, default=default)
    args = p.parse_args()
    passes = []  # (bucket, rows, requests, longest context) of each slice pass, in order
    forward_rows = Runner.forward_rows

    def watched(self, requests, ends):
        rows = sum(end - r.computed for r, end in zip(requests, ends))
        passes.append((SliceGraphs.key(rows, len(requests), max(ends)), rows, len(requests),
                       max(ends)))
        return forward_rows(self, requests, ends)

    Runner.forward_rows = watched  # this probe's own process: nothing else reads the class
    # The bench's shape shrunk to a few channels: slices follow from token counts, not widths.
    config = dataclasses.replace(CPU_MODEL, vocab_size=512, hidden_size=64, intermediate_size=128,
                                 num_heads=2, num_kv_heads=1,
                                 max_position=2 * args.long_len)
    checkpoint = ModelSpec(config=config, seed=0).checkpoint("cpu", torch.float32)
    options = build_options(VERSION, {"max_running": args.decoders + args.long_prompts})
    options["max_step_tokens"] = args.budget
    engine = VERSION.build(checkpoint, device="cpu", dtype=torch.float32, **options)
    shorts, longs = mixed.workload(args, config.vocab_size)
    mixed.warm_up(engine, args, shorts, longs, config.vocab_size, "cpu")  # as the bench warms up
    captured = {key for key, *_ in passes}
    print(f"warm-up: {len(passes)} slice passes, buckets {sorted(captured)}")
    passes.clear()
    step, stepper = [0], engine.step

    def counted():
        before = len(passes)
        out = stepper()
        for key, rows, requests, longest in passes[before:]:
            if key not in captured:
                covers = sorted(k for k in captured
                                if SliceGraphs.covers(k, rows, requests, longest))
                print(f"run step {step[0]}: bucket {key} new (rows {rows}, requests "
                      f"{requests}); captured buckets that cover it: {covers or 'none'}")
                captured.add(key)
        step[0] += 1
        return out

    engine.step = counted
    mixed.drive(engine, shorts, longs, args, "cpu")
    print(f"run: {step[0]} steps, {len(passes)} slice passes in "
          f"{len({k for k, *_ in passes})} buckets")


if __name__ == "__main__":
    main()
