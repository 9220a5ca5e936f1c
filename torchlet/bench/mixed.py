"""`torchlet bench mixed`: requests decoding while long prompts arrive, through the step API.

Some short requests are admitted and decode; then, one every few steps, long prompts arrive,
each asking for a few tokens. What a user of the decoding requests feels is the gap between two
of their tokens (inter-token latency, ITL): a step that also computes a whole long prompt is a
long gap. What the long prompts' users feel is their time to first token (TTFT). A version with
chunked prefill (v15) spends a token budget a step, so its steps stay short and the long prompts
take more steps to their first token.

A step's time is taken when step() returns its tokens to the host. ITL is measured over the
decoding requests' tokens from the first long prompt's arrival on.
"""
from __future__ import annotations

import time

import torch

from torchlet import running
from torchlet.contract import CHUNKED_PREFILL, REQUEST_STATES, GenerationParams

from .flags import device_of, dtype_of, select_versions, shape_of
from .run import ModelSpec, build_options, frozen_heap, load_version


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0..100), nearest rank: a value that occurred."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def workload(args, vocab: int):
    """(decoding prompts, long prompts) of random ids, the same for every version."""
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()  # noqa: E731
    return [ids(args.short_len) for _ in range(args.decoders)], \
        [ids(args.long_len) for _ in range(args.long_prompts)]


def drive(engine, shorts, longs, args, device: str) -> dict:
    decode_params = GenerationParams(max_new_tokens=args.decode_tokens, ignore_eos=True)
    long_params = GenerationParams(max_new_tokens=args.long_tokens, ignore_eos=True)
    times: dict[int, list[float]] = {}
    added: dict[int, float] = {}
    decoders = [engine.add_request(list(p), decode_params) for p in shorts]
    longs_left, long_ids, step, arrivals_from = list(longs), [], 0, None
    step_s: list[float] = []
    while engine.has_unfinished():
        if longs_left and all(times.get(i) for i in decoders) and step % args.every == 0:
            rid = engine.add_request(list(longs_left.pop(0)), long_params)
            long_ids.append(rid)
            added[rid] = time.perf_counter()
            arrivals_from = arrivals_from or added[rid]
        before = time.perf_counter()
        outputs = engine.step()
        now = time.perf_counter()
        step_s.append(now - before)
        step += 1
        for out in outputs:
            seen = times.setdefault(out.request_id, [])
            seen.extend([now] * (len(out.tokens) - len(seen)))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    itl = [(b - a) * 1e3 for i in decoders for a, b in zip(times[i], times[i][1:])
           if arrivals_from is not None and a >= arrivals_from]
    ttft = [(times[i][0] - added[i]) * 1e3 for i in long_ids]
    return {"itl_p50_ms": percentile(itl, 50), "itl_p99_ms": percentile(itl, 99),
            "itl_max_ms": max(itl, default=None), "ttft_p50_ms": percentile(ttft, 50),
            "ttft_p99_ms": percentile(ttft, 99), "steps": step,
            "step_p99_ms": percentile([s * 1e3 for s in step_s], 99),
            "output_tokens": sum(len(t) for t in times.values())}


def measure(args, log) -> tuple[dict, str]:
    device = device_of(args)
    dtype = dtype_of(args, device)
    config = shape_of(args, device)
    versions = select_versions(args, device, REQUEST_STATES, kernels_off=True)
    shorts, longs = workload(args, config.vocab_size)
    checkpoint = ModelSpec(config=config, seed=0).checkpoint(device, dtype)
    rows = []
    for v in versions:
        version = load_version(v.name, args.impl_root)
        options = build_options(version, {"max_running": args.decoders + args.long_prompts})
        budget = version.option_for("max_step_tokens")
        if budget is not None:  # v14 must fit a whole prompt in a step; v15 slices it
            chunked = CHUNKED_PREFILL in version.capabilities
            options[budget.name] = (args.budget if chunked
                                    else args.long_len + args.decoders + args.long_prompts)
        with running.kernels_off(device, interpret=False):  # Triton layers choose at build
            engine = version.build(checkpoint, device=device, dtype=dtype, **options)
        log(f"{v.name}: {args.decoders} decoding, {args.long_prompts} prompts of "
            f"{args.long_len} tokens arriving every {args.every} steps; options {options}")
        # On a CPU, Triton layers run their PyTorch path: timing the interpreter would time it.
        with running.kernels_off(device, interpret=False):
            warm_up(engine, args, shorts, longs, config.vocab_size, device, v.name)
            with frozen_heap():
                measured = drive(engine, shorts, longs, args, device)
            row = {"version": v.name, "budget": options.get(getattr(budget, "name", ""), None),
                   **measured}
        rows.append(row)
        del engine
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    describe = (f"{args.decoders} requests of {args.short_len} prompt tokens decoding "
                f"{args.decode_tokens} tokens each; from their first tokens on, "
                f"{args.long_prompts} prompts of {args.long_len} tokens ({args.long_tokens} new "
                f"tokens each) arrive, one every {args.every} steps; budget of a chunked-prefill "
                f"version {args.budget} rows a step, others fit a whole prompt in a step; each "
                f"version warmed up first, its timed run after a full garbage collection, with "
                f"every object alive then frozen")
    return {"workload": {"describe": describe}, "rows": rows}, device


def warm_up(engine, args, shorts, longs, vocab: int, device: str, name: str = "") -> None:
    """Run the engine through every kind of step the timed run makes, on prompts whose ids are
    shifted by one (so that a prefix cache finds none of the run's): all the short requests,
    and one long prompt arriving at the second step (every=1; arriving every `every` steps it
    came after the short ones had finished, and the warm-up ended without it). A kernel's first
    call at a shape compiles it (1 s on the H200 inside the timed run otherwise), and CUDA
    loads a kernel's module at its first launch: so the short requests are as many as the
    run's (past 16 rows torch's index_select launches another kernel), and they decode until a
    few steps past the prompt's last slice (a slice of the budget less their rows), so that a
    slice ending a prompt beside the decodes is warm too (its first run in the timed window
    was a 25 ms step on an H100, docs/perf-notes.md)."""
    shifted = [tuple((t + 1) % vocab for t in p) for p in [*shorts, *longs[:1]]]
    warm_shorts, warm_longs = shifted[:len(shorts)], shifted[len(shorts):]
    slices = -(-args.long_len // max(1, args.budget - len(shorts)))
    warm_args = argparse_like(args, decode_tokens=4 + slices * len(warm_longs), every=1)
    made = drive(engine, warm_shorts, warm_longs, warm_args, device)["output_tokens"]
    wanted = len(shorts) * warm_args.decode_tokens + len(warm_longs) * args.long_tokens
    if made != wanted:  # the warm-up ran short: it warms nothing
        raise RuntimeError(f"{name}'s warm-up made {made} tokens, not {wanted}")


def argparse_like(args, **changes):
    """A copy of args with some values changed (the warm-up's shorter run)."""
    copy = type(args)(**vars(args))
    for name, value in changes.items():
        setattr(copy, name, value)
    return copy


def summary(rows: list[dict]) -> str:
    """p99 ITL of each version, and the ratio of the last to the first."""
    shown = [r for r in rows if r.get("itl_p99_ms")]
    line = ", ".join(f"{r['version']} {r['itl_p99_ms']:.1f} ms" for r in shown)
    if len(shown) >= 2:
        line += f"; last/first {shown[-1]['itl_p99_ms'] / shown[0]['itl_p99_ms']:.2f}"
    return "p99 inter-token latency: " + line

