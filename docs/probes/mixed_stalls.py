"""bench mixed's workload, step by step, for v14 and v15 (or the versions named): each step's
wall time and rows, and which Triton kernels compiled a new variant during it (with the
specialization key), then the slowest steps. Built and warmed up as `torchlet bench mixed` does.
`--budget B --long-len N --every K --decode-tokens D` as there; `--no-specialize` marks every
kernel's integer arguments do_not_specialize first (does a stall go with it?); `--kernels N` the
kernel count and kernel time of N steps (torch.profiler, from step `--kernels-from`); `--profile` a
cProfile of each step, and prints the merged profile of the slow steps (those at or above
`--slow-quantile` of step time, no compile among them); `--trace 32,247` the cProfile of those
steps, each alone; `--alloc-stacks` the implementations' frames behind each segment the CUDA
caching allocator allocates or frees (each step's allocator counters are listed with the slowest
steps). The run is timed inside the bench's frozen heap. A step's time includes the
add_request of a prompt arriving before it, as the bench's inter-token latency does; on a CPU, tiny shapes (a check of
the script: the Triton layers run their PyTorch path, so nothing compiles)."""
import argparse
import cProfile
import pstats
import sys
import time
from collections import Counter

import torch
import triton

import implementations
from torchlet import running
from torchlet.bench import mixed
from torchlet.bench.run import ModelSpec, build_options, frozen_heap
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


def allocator_counts(device) -> dict:
    """The CUDA caching allocator's counters a stall may come from: a cudaMalloc retried after
    freeing the cache (a whole-device sync), device allocations and frees (cudaMalloc, cudaFree),
    and its syncs of every stream."""
    if device != "cuda":
        return {}
    stats = torch.cuda.memory_stats()
    return {k: stats.get(k, 0) for k in ("num_alloc_retries", "num_device_alloc",
                                          "num_device_free", "num_sync_all_streams")}


def segment_stacks(last: int = 400) -> None:
    """The caching allocator's segment allocations and frees among its last recorded actions
    (torch.cuda.memory._record_memory_history, on with --alloc-stacks): size, and the
    implementations' frames that asked for it."""
    for trace in torch.cuda.memory._snapshot()["device_traces"]:
        for entry in trace[-last:]:
            if entry["action"] in ("segment_alloc", "segment_free", "oom"):
                frames = [f"{f['filename'].split('implementations/')[-1]}:{f['line']} {f['name']}"
                          for f in entry.get("frames", []) if "implementations/" in f["filename"]]
                print(f"    {entry['action']} {entry['size'] / 2**20:.1f} MiB <- "
                      f"{' <- '.join(frames[:6]) or '?'}")
    torch.cuda.memory._record_memory_history(None)  # a fresh record for the next step
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=100000)


def run(version, checkpoint, args, device, dtype):
    options = build_options(version, {"max_running": args.decoders + args.long_prompts})
    budget = version.option_for("max_step_tokens")
    chunked = CHUNKED_PREFILL in version.capabilities
    options[budget.name] = args.budget if chunked else args.long_len + args.decoders + args.long_prompts
    engine = version.build(checkpoint, device=device, dtype=dtype, **options)
    shorts, longs = mixed.workload(args, checkpoint.config.vocab_size)
    with running.kernels_off(device, interpret=False):
        mixed.warm_up(engine, args, shorts, longs, checkpoint.config.vocab_size, device)
        fns = jit_functions()
        before = variants(fns)
        decode = GenerationParams(max_new_tokens=args.decode_tokens, ignore_eos=True)
        long_params = GenerationParams(max_new_tokens=args.long_tokens, ignore_eos=True)
        decoders = [engine.add_request(list(p), decode) for p in shorts]
        got = {i: 0 for i in decoders}
        steps, left, step = [], list(longs), 0
        frozen = frozen_heap()  # as the bench times its run: no gen-2 collection of old objects
        frozen.__enter__()
        if args.alloc_stacks and device == "cuda":
            torch.cuda.memory._record_memory_history(stacks="python", max_entries=100000)
        while engine.has_unfinished():
            arrived, add_ms = False, 0.0
            if left and all(got.values()) and step % args.every == 0:
                t = time.perf_counter()
                engine.add_request(list(left.pop(0)), long_params)
                add_ms, arrived = (time.perf_counter() - t) * 1e3, True
            profile = cProfile.Profile() if args.profile or step in args.trace else None
            kernels = None
            if args.kernels and step >= args.kernels_from and step < args.kernels_from + args.kernels:
                kernels = torch.profiler.profile(activities=[
                    torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
                kernels.__enter__()
            held = allocator_counts(device)
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
            held = {k: v - held[k] for k, v in allocator_counts(device).items() if v != held[k]}
            if held and args.alloc_stacks:
                print(f"  step {step}: {dt:.2f} ms, allocator {held}")
                segment_stacks()
            steps.append((dt + add_ms, step, arrived, len(outs), new, profile, add_ms, held))
            if step in args.trace:
                print(f"-- step {step}: {dt:.2f} ms, {len(outs)} outputs, arrival={arrived}")
                pstats.Stats(profile).sort_stats("tottime").print_stats(12)
            step += 1
        frozen.__exit__(None, None, None)
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
    for dt, i, arrived, outs, new, _, add_ms, held in sorted(steps, key=lambda s: -s[0])[:args.show]:
        what = "; ".join(f"{n} {sorted(map(str, k))[:1]}" for n, k in new.items())
        print(f"  step {i:4d} {dt:8.2f} ms (add_request {add_ms:.2f}) arrival={arrived} "
              f"outputs={outs} compiled: {what or '-'} allocator: {held or '-'}")
    print(f"  allocator over the run: {dict(sum((Counter(s[7]) for s in steps), Counter()))}")
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
    p.add_argument("--trace", type=lambda v: {int(x) for x in v.split(",")}, default=set(),
                   help="steps (comma-separated) whose own cProfile is printed, one by one")
    p.add_argument("--alloc-stacks", action="store_true",
                   help="at each step where the CUDA allocator allocates or frees a segment, the "
                        "frames that asked for it")
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
