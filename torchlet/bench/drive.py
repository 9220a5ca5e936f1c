"""Running a workload through one version, reached only through the engine contract.

A version with `request_states` is driven step by step (add_request / step / output), which shows
when each token appeared and what each step ran. An older version is driven through `stream`, one
request after another: without the step API a server can't batch requests that ask for different
lengths (generate() shares one max_new_tokens), so that is how it would serve this workload.
`--generate-batch` runs them as one generate() call instead, padded to the longest request.
"""
from __future__ import annotations

import statistics
import time

import torch

from torchlet.contract import GenerationParams, TorchletError

from .workloads import Workload


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def check_counts(row: dict, workload: Workload) -> None:
    if row["output_tokens"] != workload.output_tokens:
        raise TorchletError(f"the engine produced {row['output_tokens']} tokens where the workload "
                            f"asks for {workload.output_tokens} (eos is ignored)")


def warm_up(engine, workload: Workload, stepwise: bool) -> None:
    """One short request first, so one-time costs (allocator, kernel compilation, graph capture)
    stay out of the timing, as nano-vllm's bench does."""
    prompt, params = warm_up_prompt(workload), GenerationParams(max_new_tokens=4, ignore_eos=True)
    if stepwise:
        engine.add_request(prompt, params)
        while engine.has_unfinished():
            engine.step()
    else:
        list(engine.stream(prompt, params))


def warm_up_prompt(workload: Workload) -> list[int]:
    """The first prompt's first 16 ids, but starting with an id no prompt starts with: a prefix
    cache keys each block by every id from position 0, so the warm-up leaves nothing cached
    that a measured request could hit."""
    firsts = {p[0] for p in workload.prompts}
    prompt = list(workload.prompts[0][:16])
    prompt[0] = min(set(range(len(firsts) + 1)) - firsts)
    return prompt


def progress_bar(total: int, enabled: bool, desc: str):
    from tqdm import tqdm
    return tqdm(total=total, unit="tok", desc=desc, disable=None if enabled else True,
                leave=False, dynamic_ncols=True)


def run_steps(engine, workload: Workload, device: str, progress: bool,
              tokens: bool = False) -> dict:
    """The workload's requests, all added at once, stepped to their end; with `tokens`, the row
    also holds each request's token ids (token_ids, in the workload's order)."""
    n = workload.num_requests
    first, last, seen = [0.0] * n, [0.0] * n, [0] * n
    steps = prefill_steps = prefill_tokens = decode_tokens = 0
    prefill_time = decode_time = 0.0
    # A step per token per request, plus one per request for admission, bounds any sane engine.
    limit = workload.output_tokens + 2 * n + 1000
    bar = progress_bar(workload.output_tokens, progress, "step API")
    sync(device)
    start = time.perf_counter()
    ids = [engine.add_request(list(p), workload.params(i)) for i, p in enumerate(workload.prompts)]
    index = {rid: i for i, rid in enumerate(ids)}
    while engine.has_unfinished():
        before = time.perf_counter()
        outputs = engine.step()
        # step() hands back host token ids: its own work is done (from v14 the next step's
        # decode may still run on the device, and is timed with the step that reads it)
        now = time.perf_counter()
        stats = engine.last_step_stats()
        steps += 1
        if steps > limit:
            raise TorchletError(f"{steps} steps and still unfinished: the engine is stuck")
        if stats is not None:
            prefill_tokens += stats.num_prefill_tokens
            decode_tokens += stats.num_decode_tokens
            if stats.num_prefill_tokens:
                prefill_steps += 1
                prefill_time += now - before
            else:
                decode_time += now - before
        for out in outputs:
            i = index.get(out.request_id)
            if i is not None and len(out.tokens) > seen[i]:
                first[i] = first[i] or now
                last[i] = now
                bar.update(len(out.tokens) - seen[i])
                seen[i] = len(out.tokens)
    sync(device)
    end = time.perf_counter()
    bar.close()
    made = [list(engine.output(rid).tokens) for rid in ids]
    row = summarize(start, end, first, last, [len(t) for t in made], steps=steps,
                    prefill_steps=prefill_steps, prefill_tokens=prefill_tokens,
                    decode_tokens=decode_tokens, prefill_step_s=prefill_time,
                    decode_step_s=decode_time)
    if tokens:
        row["token_ids"] = made
    return row


def run_stream(engine, workload: Workload, device: str, progress: bool) -> dict:
    n = workload.num_requests
    first, last, counts = [0.0] * n, [0.0] * n, [0] * n
    bar = progress_bar(workload.output_tokens, progress, "stream")
    sync(device)
    start = time.perf_counter()
    for i, prompt in enumerate(workload.prompts):
        for _ in engine.stream(list(prompt), workload.params(i)):
            now = time.perf_counter()
            first[i] = first[i] or now
            last[i] = now
            counts[i] += 1
            bar.update(1)
    sync(device)
    end = time.perf_counter()
    bar.close()
    # One forward pass per streamed token: the first over the prompt, each later one for a token.
    return summarize(start, end, first, last, counts, steps=sum(counts))


def run_generate(engine, workload: Workload, device: str, progress: bool) -> dict:
    longest = max(workload.output_lens)
    sync(device)
    start = time.perf_counter()
    outputs = engine.generate([list(p) for p in workload.prompts],
                              GenerationParams(max_new_tokens=longest, ignore_eos=True))
    sync(device)
    end = time.perf_counter()
    # Useful tokens only: what each request asked for, as in the HF baseline.
    counts = [min(len(o), n) for o, n in zip(outputs, workload.output_lens)]
    row = summarize(start, end, [end] * len(counts), [end] * len(counts), counts)
    row["generated_tokens"] = sum(len(o) for o in outputs)
    return row


def summarize(start, end, first, last, counts, **extra) -> dict:
    wall = end - start
    ttft = [(f - start) * 1e3 for f in first]
    tpot = [(lt - f) * 1e3 / (c - 1) for f, lt, c in zip(first, last, counts) if c > 1 and lt > f]
    out = sum(counts)
    row = {"wall_s": wall, "output_tokens": out, "output_tok_s": out / wall,
           "ttft_mean_ms": statistics.fmean(ttft), "ttft_p50_ms": statistics.median(ttft),
           "ttft_max_ms": max(ttft), "tpot_mean_ms": statistics.fmean(tpot) if tpot else None,
           "steps": None, "prefill_tokens": None, "decode_tokens": None}
    row.update(extra)
    return row
