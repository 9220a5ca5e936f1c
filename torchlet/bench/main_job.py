"""`torchlet bench main-job`: the user's main job, one chat prompt answered greedily by the
version `torchlet generate` picks here and by Hugging Face `generate`, timed in one process.

Both run on the same checkpoint tensors, in the same dtype, batch 1, eos ignored so both make the
same number of tokens. After one untimed warm-up each, the runs alternate (HF, the versions, HF,
...) over the rounds, so a burst of other work on the machine lands on all of them alike. A run's
tokens/s is its output tokens over the wall time from the call to its last token; the table
gives the median over the rounds. The token ids are compared too: an answer that differs from
HF's greedy one is not the same job done faster. `--threads 1,2` repeats all of it at each torch
thread count, one after the other in this process, each count with its own rows; llama.cpp joins
each count's rounds as an anchor where it is installed (llama_anchor.py).
"""
from __future__ import annotations

import dataclasses
import gc
import statistics
import time

import torch

from torchlet.contract import PREFIX_CACHE, GenerationParams, TorchletError
from torchlet.running import (QUANTIZE, for_floats, kernels_off, pick_version, quantized_model,
                              resolve_device, resolve_dtype, run_mode, serving_options,
                              set_threads, weights_label)

from .contender import Contender
from .drive import progress_bar
from .run import frozen_heap, prefix_stats

HF = "HF transformers generate"


class _Clock:
    """A Hugging Face streamer that notes when each new token arrives; generate's first put()
    is the prompt."""

    def __init__(self):
        self.times: list[float] = []
        self.prompt_seen = False

    def put(self, value) -> None:
        if self.prompt_seen:
            self.times.append(time.perf_counter())
        self.prompt_seen = True

    def end(self) -> None:
        pass


def hf_contender(checkpoint, ids: list[int], n: int, device: str, dtype) -> Contender:
    import transformers

    from .hf import hf_model

    model = hf_model(checkpoint, device, dtype)

    def run(ids=ids):
        prompt = torch.tensor([ids], device=device)
        clock = _Clock()
        start = time.perf_counter()
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                             do_sample=False, use_cache=True, streamer=clock)
        return out[0, len(ids):].tolist(), clock.times[0] - start, clock.times[-1] - start

    attn = getattr(model.config, "_attn_implementation", None) or "default"
    return Contender(HF, f"transformers {transformers.__version__}, {attn} attention", run)


def engine_contender(version, checkpoint, ids: list[int], n: int, device: str, dtype,
                     impl_default: bool, weights: str | None = None,
                     name: str | None = None) -> Contender:
    """The version built and driven as run_generate does: build_sized to the prompt with the
    serving options, streamed with Triton kernels off on a CPU (never the interpreter: it is
    for the specs, and timing it would measure the interpreter)."""
    from torchlet.engines import build_sized

    scope = lambda: kernels_off(device, interpret=False)  # noqa: E731
    serving = serving_options(version, device)
    if weights:
        serving["weights"] = weights
    with scope():
        needed = len(ids) + n
        engine = build_sized(version, checkpoint, device=device, dtype=dtype,
                             max_model_len=needed if needed <= checkpoint.config.max_position
                             else None, max_running=1, **serving)
    mode = run_mode(version, device, serving, False).removeprefix(", ")
    params = GenerationParams(max_new_tokens=n, ignore_eos=True)

    def run(ids=ids):
        out, first, last = [], 0.0, 0.0
        start = time.perf_counter()
        for token in engine.stream(list(ids), params):
            last = time.perf_counter()
            first = first or last
            out.append(token)
        return out, first - start, last - start

    cached = PREFIX_CACHE in version.capabilities
    who = "torchlet generate's default" if impl_default else "--versions"
    label = weights_label(version, checkpoint, serving)
    return Contender(name or version.name, ", ".join(m for m in (who, mode, label) if m), run, scope,
                     engine.prefix_cache_stats if cached else None, {"default": impl_default})


def versions_of(args, device: str) -> list:
    """The default version first, then the ones --versions names (the default is always timed:
    it is what the user gets)."""
    chosen = [pick_version(None, args.impl_root, device, quantized=quantized_model(args))]
    for name in (args.versions or "").split(","):
        if name.strip():
            version = pick_version(name.strip(), args.impl_root, device)
            if version.name not in [v.name for v in chosen]:
                chosen.append(version)
    return chosen


def check_args(args) -> None:
    thread_counts(args.threads)
    if args.max_new_tokens < 1:
        raise TorchletError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.rounds < 1:
        raise TorchletError(f"--rounds must be at least 1, got {args.rounds}")


def load_model(args):
    """(checkpoint directory, readable name) of --model: the packaged SmolLM2 by default, a
    GGUF file converted on first use."""
    from torchlet.gguf_model import resolve_model

    return resolve_model(args.model, progress=not args.quiet)


def thread_counts(text: str | None) -> list[int | None]:
    """--threads 1,2 as [1, 2]; none given, [None]: one run with the threads generate picks."""
    if text is None:
        return [None]
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        counts = [0]
    if min(counts) < 1 or len(set(counts)) < len(counts):
        raise TorchletError(f"--threads takes distinct positive counts separated by commas, "
                            f"e.g. 1,2; got {text!r}")
    return counts


def contenders_for(versions, checkpoint, ids: list[int], n: int, device: str, dtype, log,
                   formats=QUANTIZE):
    """HF, then each version, built for these ids: (contenders, {name: error} of those that
    failed to build, every name in order). HF and the versions of float weights get the
    checkpoint dequantized; a version that reads quantized weights gets it as stored (its plain
    row: what generate runs), then a row for each of `formats` made at load."""
    from torchlet.contract import QUANTIZED_WEIGHTS, dequantized

    floats = dataclasses.replace(checkpoint, tensors=dequantized(checkpoint.tensors))
    builders = [(HF, lambda: hf_contender(floats, ids, n, device, dtype))]
    for v in versions:
        reads = QUANTIZED_WEIGHTS in v.capabilities
        for weights in (None, *formats) if reads else (None,):
            name = f"{v.name} ({weights})" if weights else v.name
            held = checkpoint if reads else floats
            builders.append((name, lambda v=v, w=weights, name=name, held=held: engine_contender(
                v, held, ids, n, device, dtype, v is versions[0] and not w, w, name)))
    return build_each(builders, log)


def build_each(builders, log):
    """(contenders, {name: error} of those that failed to build, every name in order)."""
    contenders, failed = [], {}
    for name, build in builders:
        try:
            contenders.append(build())
        except Exception as e:  # noqa: BLE001  (a version that can't build is a row, not a crash)
            failed[name] = f"{type(e).__name__}: {e}"
            log(f"{name}: failed: {failed[name]}")
    return contenders, failed, [name for name, _ in builders]


def interleave(contenders, failed: dict, rounds: int, n: int, bar, log,
               warmup: list[int] | None = None) -> tuple[dict, dict, dict]:
    """Round 0, an untimed warm-up, then `rounds` rounds, each contender once a round in turn.
    The warm-up runs the prompt itself and is kept (summarize drops it from the timing), or,
    given `warmup`, those ids and is dropped. Returns the runs by name, the CPU seconds this
    process spent in each of them (beside the wall time, which other work on the machine
    stretches), and each prefix cache's counters before the first timed round."""
    runs = {c.name: [] for c in contenders}
    cpu = {c.name: [] for c in contenders}
    before = {}
    # What exists now is never collected during the rounds: each collect below then scans only
    # what the runs made, not every object of the process.
    with frozen_heap():
        for round_ in range(rounds + 1):
            run_round(contenders, failed, runs, cpu, before, round_, n, bar, log, warmup)
    return runs, cpu, before


def run_round(contenders, failed: dict, runs: dict, cpu: dict, before: dict, round_: int,
              n: int, bar, log, warmup: list[int] | None) -> None:
    for c in contenders:
        if c.name in failed:
            continue
        try:
            with c.scope():
                if round_ == 1 and c.stats:
                    before[c.name] = c.stats()
                gc.collect()  # so no collection of the previous run lands in this one
                start = time.process_time()
                got = c.run(warmup) if round_ == 0 and warmup else c.run()
                spent = time.process_time() - start
            if len(got[0]) != n:
                raise TorchletError(f"made {len(got[0])} tokens where {n} were asked "
                                    f"for (eos is ignored)")
            if round_ or not warmup:
                runs[c.name].append(got)
                cpu[c.name].append(spent)
        except Exception as e:  # noqa: BLE001
            failed[c.name] = f"{type(e).__name__}: {e}"
            log(f"{c.name}: failed: {failed[c.name]}")
        bar.update(n)


def add_prefix_stats(rows: list[dict], contenders, failed: dict, before: dict) -> None:
    for c in contenders:
        if c.stats and c.name not in failed:
            next(r for r in rows if r["version"] == c.name).update(
                prefix_stats(before[c.name], c.stats()))


def measure(args, log) -> tuple[dict, str]:
    """The payload of main-job.json and the device it ran on."""
    from torchlet.checkpoints import load_hf_dir
    from torchlet.text import load_tokenizer, prompt_ids

    from .llama_anchor import gguf_of, skip_reason

    check_args(args)
    device = resolve_device(args.device)
    versions = versions_of(args, device)
    model_dir, model_name = load_model(args)
    checkpoint = load_hf_dir(model_dir, quantized=True)  # dequantized for whom reads floats
    versions[0] = for_floats(versions[0], args, device, checkpoint)
    versions = [v for i, v in enumerate(versions)
                if v.name not in [u.name for u in versions[:i]]]
    ids = prompt_ids(load_tokenizer(model_dir), args.prompt)
    dtype = resolve_dtype(args.dtype, device)
    n = args.max_new_tokens
    contenders, failed, order = contenders_for(versions, checkpoint, ids, n, device, dtype, log)
    gguf = gguf_of(args.model)
    skipped = skip_reason(gguf, device)
    rows, counts = [], []
    for count in thread_counts(args.threads):
        set_threads(count)
        counts.append(torch.get_num_threads())
        rows += at_threads(contenders, dict(failed), order,
                           None if skipped else (gguf, ids), args.rounds, n, args.quiet, log)
    if skipped:
        log(skipped)
    dtype_name = str(dtype).removeprefix("torch.")
    threads = ", ".join(map(str, counts))
    job = {"name": "main-job", "prompt": args.prompt, "prompt_tokens": len(ids),
           "max_new_tokens": n, "rounds": args.rounds, "model": model_name, "device": device,
           "dtype": dtype_name, "default_version": versions[0].name, "threads": counts,
           "describe": f"the chat prompt {args.prompt!r} ({len(ids)} tokens with the chat "
                       f"template) to {model_name}, {dtype_name} on {device}, greedy, {n} new "
                       f"tokens (eos ignored), batch 1, torch threads {threads}; timed rounds: "
                       f"{args.rounds} at each thread count, the rows alternating, after one "
                       f"untimed warm-up each"}
    return {"workload": job, "rows": rows, "notes": [skipped] if skipped else []}, device


def at_threads(contenders, failed: dict, order: list[str], anchor, rounds: int, n: int,
               quiet: bool, log) -> list[dict]:
    """The rows of one thread count (torch's, set already): the contenders' rounds, and with
    `anchor` (gguf, ids), llama.cpp's with as many threads, alternating with them."""
    from .llama_anchor import NAME, llama_contender

    threads = torch.get_num_threads()
    if anchor:
        built, broken, _ = build_each([(NAME, lambda: llama_contender(*anchor, n, threads))], log)
        contenders, order = contenders + built, order + [NAME]
        failed.update(broken)
    bar = progress_bar(len(contenders) * (rounds + 1) * n, not quiet, f"main job, {threads} "
                       f"thread{'' if threads == 1 else 's'}")
    runs, _, before = interleave(contenders, failed, rounds, n, bar, log)
    bar.close()
    rows = summarize(contenders, runs, failed, order, log)
    add_prefix_stats(rows, contenders, failed, before)
    return [{**row, "threads": threads} for row in rows]


def summarize(contenders, runs: dict, failed: dict, order: list[str], log,
              warmed: bool = True) -> list[dict]:
    """One row per contender, in `order`: medians over the timed rounds (the warm-up, when the
    runs hold it, dropped), the ratio of medians to HF's, and whether its token ids are HF's."""
    hf_ids = runs[HF][0][0] if HF in runs and HF not in failed else None
    rows = {}
    for c in contenders:
        if c.name in failed:
            continue
        timed = runs[c.name][1:] if warmed else runs[c.name]
        tok_s = [len(got) / last for got, _, last in timed]
        row = {"version": c.name, "mode": c.mode, **c.extra, "output_tokens": len(timed[0][0]),
               "tok_s": tok_s, "first_token_ms": [1e3 * first for _, first, _ in timed],
               "tok_s_median": statistics.median(tok_s), "tok_s_min": min(tok_s),
               "tok_s_max": max(tok_s),
               "first_token_ms_median": statistics.median(1e3 * f for _, f, _ in timed),
               "token_ids": runs[c.name][0][0],
               "repeatable": all(got == runs[c.name][0][0] for got, _, _ in timed)}
        if hf_ids is not None and c.name != HF:
            row["first_difference"] = first_difference(row["token_ids"], hf_ids)
            row["same_ids_as_hf"] = row["first_difference"] is None
            if not row["same_ids_as_hf"] and not c.extra.get("anchor"):
                log(f"warning: {c.name}'s greedy tokens differ from HF's from token "
                    f"{row['first_difference']} on")
        rows[c.name] = row
    hf = rows.get(HF)
    for row in rows.values():
        row["vs_hf"] = row["tok_s_median"] / hf["tok_s_median"] if hf else None
    for name, error in failed.items():
        rows[name] = {"version": name, "error": error}
    return [rows[name] for name in order if name in rows]


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                None if len(a) == len(b) else min(len(a), len(b)))
