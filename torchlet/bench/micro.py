"""Microbenchmarks: one decode step of a whole engine, and the paged attention kernel alone.

A decode step is memory-bound: it reads every weight once and each request's K/V, so its bound
is those bytes over the bandwidth. The kernel benchmark feeds a version's paged decode attention
(the kernel it declares as PAGED_DECODE_ATTENTION: v10's Triton one by default) and torch's SDPA
(on contiguous K/V) the very same keys and values.
"""
from __future__ import annotations

import random
import time

import torch

from torchlet.contract import (MAX_RUNNING, MAX_STEP_TOKENS, PAGED_DECODE_ATTENTION,
                               REQUEST_STATES, GenerationParams, TorchletError)

from .floor import weight_bytes
from .drive import sync
from . import DECODE_STEPS, DECODE_WARMUP
from .run import build_engine, frozen_heap
from .workloads import Workload


def decode_step_bench(version, checkpoint, batch: int, context: int, *, device: str, dtype,
                      wishes: dict, named: dict | None = None, steps: int = DECODE_STEPS,
                      warmup: int = DECODE_WARMUP, profile_steps: int = 5,
                      bandwidth: float) -> dict:
    """`batch` requests with `context`-token prompts, prefilled, then timed decode steps that
    must be pure decode (no prefill row, every request in the batch). The defaults are `bench
    decode`'s."""
    if REQUEST_STATES not in version.capabilities:
        raise TorchletError(f"{version.name} has no step API ({REQUEST_STATES}) to time one step")
    rng = random.Random(batch * 100003 + context)
    vocab = checkpoint.config.vocab_size
    # Prefill may take up to `batch` steps (one prompt a step under a tight token budget), during
    # which the requests admitted first already decode: none may finish before the timing ends.
    total = warmup + steps + profile_steps + 2 + batch
    if context + total > checkpoint.config.max_position:
        raise TorchletError(f"context {context} + the {total} tokens a cell decodes exceed the "
                            f"model's {checkpoint.config.max_position} positions")
    prompts = tuple(tuple(rng.randrange(vocab) for _ in range(context)) for _ in range(batch))
    workload = Workload(f"decode-B{batch}-ctx{context}", prompts, (total,) * batch)
    # A step's budget holds a whole prompt beside every decode row: a scheduler that does not
    # split prompts would otherwise never admit the second one.
    wishes = {**wishes, MAX_RUNNING: batch,
              MAX_STEP_TOKENS: max(context + batch, wishes.get(MAX_STEP_TOKENS) or 0)}
    engine, options = build_engine(version, checkpoint, device, dtype, wishes, workload, named)
    ids = [engine.add_request(list(p), GenerationParams(max_new_tokens=total, ignore_eos=True))
           for p in prompts]
    while min(len(engine.output(i).tokens) for i in ids) < 1:  # prefill, chunked or not
        engine.step()

    def decode(n: int) -> None:
        for _ in range(n):
            engine.step()
            stats = engine.last_step_stats()
            if stats.num_prefill_tokens or stats.num_decode_tokens != batch:
                raise TorchletError(f"{version.name}: a timed step ran {stats.num_prefill_tokens} "
                                    f"prefill and {stats.num_decode_tokens} decode tokens, "
                                    f"not a decode of all {batch}")

    decode(warmup)
    sync(device)
    with frozen_heap():  # no collection scans the engine's objects inside the timed steps
        start = time.perf_counter()
        decode(steps)
        sync(device)
        ms = (time.perf_counter() - start) * 1e3 / steps
    profiled = device_profile(lambda: decode(profile_steps), profile_steps) \
        if device.startswith("cuda") and profile_steps else {}
    gpu_ms = profiled.get("gpu_ms_per_step")
    elem = torch.finfo(dtype).bits // 8
    mean_context = context + warmup + 1 + steps / 2
    moved = weight_bytes(checkpoint.config, elem) + batch * mean_context * \
        checkpoint.config.kv_bytes_per_token(elem)
    for i in ids:
        engine.abort(i)
    return {"version": version.name, "batch": batch, "context": context, "ms_per_step": ms,
            "gpu_ms_per_step": gpu_ms, "host_ms_per_step": None if gpu_ms is None else ms - gpu_ms,
            "kernels_per_step": profiled.get("kernels_per_step"),
            "profiled_ms_per_step": profiled.get("profiled_ms_per_step"),
            "host_wait_ms_per_step": profiled.get("host_wait_ms_per_step"),
            "top_kernels": profiled.get("top_kernels"),
            "bytes_per_step": moved, "gb_s": moved / ms / 1e6,
            "pct_bound": 100 * moved / (ms / 1e3) / bandwidth, "build_options": options}


# CUDA runtime calls in which the host blocks until the device catches up (a copy to the host
# waits for the work before it on its stream).
HOST_WAITS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize",
              "cudaMemcpy")


def busy_us(spans) -> float:
    """How long at least one of the (start, end) spans ran: their union's length. Kernels
    launched dependent (programmatic dependent launch) start before the one before them ends,
    and the profiler times each from its start: their sum would count the overlap twice."""
    busy, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            busy += end - max(start, reach)
            reach = end
    return busy


def device_profile(run, steps: int, top: int = 8) -> dict:
    """What the device did per step (torch profiler): the time it ran at least one kernel or
    copy (busy_us), against which the wall time per step shows how long the GPU waited on the
    host; kernels launched (a replayed graph's kernels are counted one by one); the kernels
    that took the most time (each timed from its start, an early dependent start included), as
    [name, ms per step, launches per step]; and the profiled steps' wall time with the part
    of it the host spent blocked in HOST_WAITS calls (the rest is the host's own work, the
    profiler's cost included)."""
    from collections import defaultdict

    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            run()
            torch.cuda.synchronize()
            wall = time.perf_counter() - start
        per_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        waits = 0.0
        spans = []
        for e in prof.events():
            if e.device_type != DeviceType.CUDA:
                if e.name.startswith(HOST_WAITS):
                    waits += e.cpu_time_total / 1e3 / steps
                continue
            spans.append((e.time_range.start, e.time_range.end))
            if not e.name.startswith(("Memcpy", "Memset")):
                per_name[e.name][0] += e.device_time_total / 1e3 / steps
                per_name[e.name][1] += 1 / steps
        ranked = sorted(per_name.items(), key=lambda kv: -kv[1][0])
        return {"gpu_ms_per_step": busy_us(spans) / 1e3 / steps,
                "profiled_ms_per_step": wall * 1e3 / steps,
                "host_wait_ms_per_step": waits,
                "kernels_per_step": sum(n for _, n in per_name.values()),
                "top_kernels": [[name[:80], round(ms, 4), round(n, 2)]
                                for name, (ms, n) in ranked[:top]]}
    except Exception:  # noqa: BLE001  (a profiler that can't run leaves the columns empty)
        return {}


def kernel_bench(version, batch: int, context: int, *, heads: int, kv_heads: int, head_dim: int,
                 device: str, dtype, block_size: int = 16, bandwidth: float,
                 iters: int = 50) -> dict:
    """Paged decode attention (blocks scattered at random) vs SDPA on contiguous K/V."""
    paged = version.kernel(PAGED_DECODE_ATTENTION)
    g = torch.Generator(device=device).manual_seed(batch * 7919 + context)
    k = torch.randn(batch, context, kv_heads, head_dim, generator=g, device=device).to(dtype)
    v = torch.randn(batch, context, kv_heads, head_dim, generator=g, device=device).to(dtype)
    q = torch.randn(batch, heads, head_dim, generator=g, device=device).to(dtype)
    per_request = -(-context // block_size)
    num_blocks = 1 + batch * per_request  # block 0 is the null block
    order = torch.randperm(num_blocks - 1, generator=torch.Generator().manual_seed(0)) + 1
    tables = order.view(batch, per_request).to(device=device, dtype=torch.int32)
    k_cache = torch.zeros(num_blocks, block_size, kv_heads, head_dim, device=device, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    pos = torch.arange(context, device=device)
    slots = (tables[:, pos // block_size].long() * block_size + pos % block_size).reshape(-1)
    k_cache.view(-1, kv_heads, head_dim)[slots] = k.reshape(-1, kv_heads, head_dim)
    v_cache.view(-1, kv_heads, head_dim)[slots] = v.reshape(-1, kv_heads, head_dim)
    lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    scale = head_dim ** -0.5
    kc, vc = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()  # [B, KV, ctx, D]
    q4 = q.unsqueeze(2)

    def run_paged():
        return paged(q, k_cache, v_cache, tables, lens, scale)

    def run_sdpa():
        return torch.nn.functional.scaled_dot_product_attention(q4, kc, vc, scale=scale,
                                                                enable_gqa=True).squeeze(2)

    diff = (run_paged().float() - run_sdpa().float()).abs().max().item()
    # Timed as the engine runs them, inside a CUDA graph: eagerly, a small call's host checks
    # and launch would be most of what is timed.
    (timed_paged, timed_sdpa), timing = graphed([run_paged, run_sdpa], device)
    paged_ms, sdpa_ms = time_ms(timed_paged, device, iters), time_ms(timed_sdpa, device, iters)
    elem = torch.finfo(dtype).bits // 8
    moved = 2 * k.numel() * elem + 2 * q.numel() * elem  # K and V once, q in and out once
    chained = {}  # and where the data fits twice in L2, no chained figures
    if timing == "graph" and moved > 2 * torch.cuda.get_device_properties(device).L2_cache_size:
        for name, fn in (("paged", run_paged), ("sdpa", run_sdpa)):
            ms = chain_ms(fn, CHAIN)
            chained |= {f"{name}_chain_ms": ms, "chain_calls": CHAIN,
                        f"{name}_chain_pct_bound": 100 * moved / (ms / 1e3) / bandwidth}
    return {"version": version.name, "batch": batch, "context": context, "block_size": block_size,
            "dtype": str(dtype).replace("torch.", ""), "timing": timing, "bytes": moved,
            "paged_ms": paged_ms,
            "sdpa_ms": sdpa_ms, "paged_gb_s": moved / paged_ms / 1e6,
            "sdpa_gb_s": moved / sdpa_ms / 1e6, "ratio": sdpa_ms / paged_ms,
            "paged_pct_bound": 100 * moved / (paged_ms / 1e3) / bandwidth,
            "sdpa_pct_bound": 100 * moved / (sdpa_ms / 1e3) / bandwidth, "max_abs_diff": diff,
            **chained}


CHAIN = 20


def chain_ms(fn, calls: int, replays: int = 5) -> float:
    """fn's time a call inside one CUDA graph of `calls` back-to-back calls: the kernel's own
    time, its launch's cost spread over the chain, as in an engine's step where it is one kernel
    of many. Only where the data is over twice L2, so that no call finds its inputs in L2 from
    the call before."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (replays * calls)


def graphed(fns, device: str):
    """Each fn captured as a CUDA graph (its replay in its place) and "graph"; on a CPU, or
    where a capture fails, the fns themselves and "eager"."""
    if not device.startswith("cuda"):
        return fns, "eager"
    try:
        replays = []
        for fn in fns:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()  # compiles and allocates outside the capture
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
            replays.append(graph.replay)
        return replays, "graph"
    except RuntimeError:
        return fns, "eager"


def time_ms(fn, device: str, iters: int) -> float:
    if device.startswith("cuda"):
        import triton.testing
        return triton.testing.do_bench(fn, warmup=10, rep=max(iters, 20))  # flushes L2 between runs
    fn()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) * 1e3 / iters
