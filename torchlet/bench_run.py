"""Running a workload through one version, reached only through the engine contract.

A version with `request_states` is driven step by step (add_request / step / output), which shows
when each token appeared and what each step ran. An older version is driven through `stream`, one
request after another: without the step API a server can't batch requests that ask for different
lengths (generate() shares one max_new_tokens), so that is how it would serve this workload.
`--generate-batch` runs them as one generate() call instead, padded to the longest request.
"""
from __future__ import annotations

import gc
import inspect
import resource
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from torchlet.contract import REQUEST_STATES, GenerationParams, TorchletError

from .bench_workloads import Workload, random_checkpoint

MEMORY_MEASURES = {
    "cuda": "torch.cuda.max_memory_allocated during build and run (weights included)",
    "cpu": "growth of the process's peak RSS (resource.getrusage ru_maxrss) from just before "
           "build to the end of the run; a fresh process per version unless --in-process",
}


@dataclass(frozen=True)
class ModelSpec:
    """How to get the checkpoint, cheap to send to a child process: a random model from a config
    and seed, or a Hugging Face directory."""

    config: Any = None
    seed: int = 0
    hf_dir: str | None = None

    def checkpoint(self, device, dtype):
        if self.hf_dir:
            from torchlet.checkpoints import load_hf_dir
            return load_hf_dir(self.hf_dir)
        return random_checkpoint(self.config, self.seed, device=device, dtype=dtype)


@dataclass(frozen=True)
class Job:
    version: str
    root: str | None
    model: ModelSpec
    workload: Workload
    device: str = "cpu"
    dtype: str = "float32"
    wishes: dict = field(default_factory=dict)  # build options, passed where build accepts them
    generate_batch: bool = False
    progress: bool = True
    threads: int | None = None


def load_version(name: str, root: str | None):
    import implementations
    from pathlib import Path
    return implementations.load(name, Path(root).resolve() if root else implementations.REFERENCE_ROOT)


# Names a version might give the longest sequence it must hold (v05's slots reserve that many
# rows each); set to the workload's longest request when build accepts one and none is wished.
LENGTH_OPTIONS = ("max_len", "max_seq_len", "max_model_len", "max_context", "max_length")


def build_options(build, wishes: dict, workload: Workload | None = None) -> dict:
    """The wished options that `build` names as parameters (never through **options: a version
    refuses what it doesn't know). Sizes a version needs and wasn't given (num_blocks, the
    longest sequence) are derived from the workload so that every request fits at once."""
    params = inspect.signature(build).parameters
    named = {n for n, p in params.items()
             if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)} - {"checkpoint"}
    options = {k: v for k, v in wishes.items() if k in named and v is not None}
    if workload is None:
        return options
    longest = max(len(p) + n for p, n in zip(workload.prompts, workload.output_lens))
    for name in LENGTH_OPTIONS:
        if name in named and name not in options:
            options[name] = longest
    if "num_blocks" in named and "num_blocks" not in options:
        default = params["block_size"].default if "block_size" in params else 16
        size = options.get("block_size") or (16 if default is inspect.Parameter.empty else default)
        options["num_blocks"] = 1 + sum(-(-(len(p) + n) // size)
                                        for p, n in zip(workload.prompts, workload.output_lens))
    return options


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_job(job: Job) -> dict:
    """Build the version, warm it up, run the workload; one row of results."""
    if job.threads:
        torch.set_num_threads(job.threads)
    version = load_version(job.version, job.root)
    dtype = getattr(torch, job.dtype)
    checkpoint = job.model.checkpoint(job.device, dtype)
    options = build_options(version.package.build, job.wishes, job.workload)
    cuda = job.device.startswith("cuda")
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    engine = version.build(checkpoint, device=job.device, dtype=dtype, **options)
    stepwise = REQUEST_STATES in version.capabilities
    mode = "step" if stepwise else ("generate" if job.generate_batch else "stream")
    warm_up(engine, job.workload, stepwise)
    runner = {"step": run_steps, "stream": run_stream, "generate": run_generate}[mode]
    row = runner(engine, job.workload, job.device, job.progress)
    if cuda:
        peak = torch.cuda.max_memory_allocated() / 1e6
    else:  # ru_maxrss is in KiB on Linux
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) * 1024 / 1e6
    del engine
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    check_counts(row, job.workload)
    row["total_tok_s"] = (job.workload.prompt_tokens + row["output_tokens"]) / row["wall_s"]
    return {"version": version.name, "mode": mode, "device": job.device, "dtype": job.dtype,
            "build_options": options, "requests": job.workload.num_requests,
            "prompt_tokens": job.workload.prompt_tokens,
            "expected_output_tokens": job.workload.output_tokens,
            "peak_memory_mb": peak, "memory_measure": MEMORY_MEASURES["cuda" if cuda else "cpu"],
            **row}


def check_counts(row: dict, workload: Workload) -> None:
    if row["output_tokens"] != workload.output_tokens:
        raise TorchletError(f"the engine produced {row['output_tokens']} tokens where the workload "
                            f"asks for {workload.output_tokens} (eos is ignored)")


def warm_up(engine, workload: Workload, stepwise: bool) -> None:
    """One short request first, so one-time costs (allocator, kernel compilation, graph capture)
    stay out of the timing, as nano-vllm's bench does."""
    prompt, params = list(workload.prompts[0][:16]), GenerationParams(max_new_tokens=4,
                                                                      ignore_eos=True)
    if stepwise:
        engine.add_request(prompt, params)
        while engine.has_unfinished():
            engine.step()
    else:
        list(engine.stream(prompt, params))


def progress_bar(total: int, enabled: bool, desc: str):
    from tqdm import tqdm
    return tqdm(total=total, unit="tok", desc=desc, disable=None if enabled else True,
                leave=False, dynamic_ncols=True)


def run_steps(engine, workload: Workload, device: str, progress: bool) -> dict:
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
        now = time.perf_counter()  # step() hands back host token ids: the device is done
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
    counts = [len(engine.output(rid).tokens) for rid in ids]
    return summarize(start, end, first, last, counts, steps=steps, prefill_steps=prefill_steps,
                     prefill_tokens=prefill_tokens,
                     decode_tokens=decode_tokens, prefill_step_s=prefill_time,
                     decode_step_s=decode_time)


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


def run_jobs(jobs: list[Job], isolate: bool, log=print) -> list[dict]:
    """Each job in a fresh process when `isolate` (so a version's peak RSS is its own), else
    here. A version that fails gives a row with its error; the others still run."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    rows = []
    for job in jobs:
        try:
            if isolate:
                with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                    row = pool.submit(run_job, job).result()
            else:
                row = run_job(job)
            log(f"{row['version']}: {row['wall_s']:.2f} s, {row['output_tok_s']:.1f} output tok/s")
        except Exception as e:  # noqa: BLE001  (any failure is reported in the table)
            row = {"version": job.version, "error": f"{type(e).__name__}: {e}"}
            log(f"{job.version}: failed: {row['error']}")
        rows.append(row)
    return rows
