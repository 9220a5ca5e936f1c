"""bench mixed's workload, step by step, for v14 and v15 (or the versions named): each step's
wall time and rows, and which Triton kernels compiled a new variant during it (with the
specialization key), then the slowest steps. Built and warmed up as `torchlet bench mixed` does.
`--budget B --long-len N --every K --decode-tokens D` as there; `--no-specialize` marks every
kernel's integer arguments do_not_specialize first (does a stall go with it?); `--kernels N` the
kernel count and kernel time of N steps (torch.profiler, from step `--kernels-from`); `--profile` a
cProfile of each step, and prints the merged profile of the slow steps (those at or above
`--slow-quantile` of step time, no compile among them). A step's time includes the
add_request of a prompt arriving before it, as the bench's inter-token latency does; on a CPU, tiny shapes (a check of
the script: the Triton layers run their PyTorch path, so nothing compiles)."""
import argparse
import cProfile
import pstats
import sys
import time

import torch
import triton

import implementations
from torchlet import running
from torchlet.bench import mixed
from torchlet.bench.run import ModelSpec, build_options
from torchlet.bench.workloads import CPU_MODEL, QWEN25_05B
from torchlet.contract import CHUNKED_PREFILL, GenerationParams


def jit_functions():
    """Every Triton kernel the versions define, by name."""
    found = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("implementations.") and module is not None:
            for attr, value in vars(module).items():
                if isinstance(value, triton.runtime.jit.JITFunction):
                    found[f"{name.split('.')[1][:3]}.{attr}"] = value
    return found


def variants(fns):
    """name -> set of compiled keys, over devices."""
    out = {}
    for name, fn in fns.items():
        keys = set()
        for cache in getattr(fn, "device_caches", {}).values():
            keys |= set((cache[0] if isinstance(cache, tuple) else cache).keys())
        out[name] = keys
    return out


def run(version, checkpoint, args, device, dtype):
    options = build_options(version, {"max_running": args.decoders + args.long_prompts})
    budget = version.option_for("max_step_tokens")
    chunked = CHUNKED_PREFILL in version.capabilities
    options[budget.name] = args.budget if chunked else args.long_len + args.decoders + args.long_prompts
    engine = version.build(checkpoint, device=device, dtype=dtype, **options)
    shorts, longs = mixed.workload(args, checkpoint.config.vocab_size)
    with running.kernels_off(device, interpret=False):
        warm = [tuple((t + 1) % checkpoint.config.vocab_size for t in longs[0])]
        # As the bench warms up: the long prompt arrives at the second step (every=1), while the
        # short request still decodes; arriving every `every` steps it came after the short one
        # had finished, and the warm-up ended without it (its slices' graphs then captured in
        # the measured run, as they are not in the bench's).
        mixed.drive(engine, shorts[:1], warm,
                    mixed.argparse_like(args, decode_tokens=4, every=1), device)
        fns = jit_functions()
        before = variants(fns)
        decode = GenerationParams(max_new_tokens=args.decode_tokens, ignore_eos=True)
        long_params = GenerationParams(max_new_tokens=args.long_tokens, ignore_eos=True)
        decoders = [engine.add_request(list(p), decode) for p in shorts]
        got = {i: 0 for i in decoders}
        steps, left, step = [], list(longs), 0
        while engine.has_unfinished():
            arrived, add_ms = False, 0.0
            if left and all(got.values()) and step % args.every == 0:
                t = time.perf_counter()
                engine.add_request(list(left.pop(0)), long_params)
                add_ms, arrived = (time.perf_counter() - t) * 1e3, True
            profile = cProfile.Profile() if args.profile else None
            kernels = None
            if args.kernels and step >= args.kernels_from and step < args.kernels_from + args.kernels:
                kernels = torch.profiler.profile(activities=[
                    torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
                kernels.__enter__()
            t = time.perf_counter()
            if profile:
                profile.enable()
            outs = engine.step()
            if profile:
                profile.disable()
            dt = (time.perf_counter() - t) * 1e3
            if kernels is not None:
                if device == "cuda":
                    torch.cuda.synchronize()
                kernels.__exit__(None, None, None)
                gpu = [e for e in kernels.events() if e.device_type == torch.autograd.DeviceType.CUDA]
                busy = sum(e.device_time for e in gpu) / 1e3
                print(f"  step {step}: wall {dt:.2f} ms, {len(gpu)} kernels, {busy:.2f} ms of "
                      f"kernel time (the step's own launches and the decode ahead's)")
            now = variants(fns)
            new = {n: now[n] - before[n] for n in now if now[n] - before[n]}
            before = now
            for o in outs:
                if o.request_id in got:
                    got[o.request_id] = len(o.tokens)
            steps.append((dt + add_ms, step, arrived, len(outs), new, profile, add_ms))
            step += 1
    times = sorted(s[0] for s in steps)
    print(f"{version.name}: {len(steps)} steps, median {times[len(times) // 2]:.2f} ms, "
          f"p99 {times[int(0.99 * len(times))]:.2f} ms, max {times[-1]:.2f} ms, "
          f"steps with a compile: {sum(1 for s in steps if s[4])}")
    for label, chosen in (("arrival", [s for s in steps if s[2]]),
                          ("other", [s for s in steps if not s[2]])):
        ts = sorted(s[0] for s in chosen)
        if ts:
            adds = sorted(s[6] for s in chosen)
            print(f"  {label} steps: {len(ts)}, median {ts[len(ts) // 2]:.2f} ms, p90 "
                  f"{ts[int(0.9 * len(ts))]:.2f}, max {ts[-1]:.2f}; add_request median "
                  f"{adds[len(adds) // 2]:.2f} ms")
    for dt, i, arrived, outs, new, _, add_ms in sorted(steps, key=lambda s: -s[0])[:args.show]:
        what = "; ".join(f"{n} {sorted(map(str, k))[:1]}" for n, k in new.items())
        print(f"  step {i:4d} {dt:8.2f} ms (add_request {add_ms:.2f}) arrival={arrived} "
              f"outputs={outs} compiled: {what or '-'}")
    if args.profile:
        median = times[len(times) // 2]
        slow = times[int(args.slow_quantile * len(times))]
        for title, keep in (("slow", lambda s: s[0] >= slow and not s[4]),
                            ("typical", lambda s: abs(s[0] - median) < 0.1 * median)):
            chosen = [s[5] for s in steps if keep(s)][:20]
            if chosen:
                stats = pstats.Stats(chosen[0])
                for prof in chosen[1:]:
                    stats.add(prof)
                print(f"-- {version.name}: {title} steps, {len(chosen)} merged")
                stats.sort_stats("tottime").print_stats(14)
                stats.sort_stats("cumulative").print_stats(22)
    del engine


def main():
    p = argparse.ArgumentParser()
    p.add_argument("versions", nargs="*", default=["v14_overlap", "v15_chunked_prefill"])
    p.add_argument("--budget", type=int, default=512)
    p.add_argument("--decoders", type=int, default=16)
    p.add_argument("--short-len", type=int, default=64)
    p.add_argument("--decode-tokens", type=int, default=512)
    p.add_argument("--long-prompts", type=int, default=16)
    p.add_argument("--long-len", type=int, default=8192)
    p.add_argument("--long-tokens", type=int, default=4)
    p.add_argument("--every", type=int, default=16)
    p.add_argument("--no-specialize", action="store_true")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--kernels", type=int, default=0,
                   help="profile this many steps with the torch profiler: kernels and their time")
    p.add_argument("--kernels-from", type=int, default=40)
    p.add_argument("--slow-quantile", type=float, default=0.95,
                   help="--profile merges the steps at or above this quantile of step time")
    p.add_argument("--show", type=int, default=12, help="how many of the slowest steps to list")
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    config = QWEN25_05B if cuda else CPU_MODEL
    checkpoint = ModelSpec(config=config, seed=0).checkpoint(device, dtype)
    versions = [implementations.load(name) for name in args.versions]
    if args.no_specialize:
        for fn in jit_functions().values():
            for param in fn.params:
                if not param.is_constexpr:
                    param.do_not_specialize = param.do_not_specialize_on_alignment = True
    for version in versions:
        run(version, checkpoint, args, device, dtype)


if __name__ == "__main__":
    main()
