"""One version built and run on a workload, in a process of its own or here.

Build options are read from what each version declares (OPTIONS, through version.options), never
guessed: a version gets only the options it declares, found by their contract role, and the
sizes it has a role for are derived from the workload.
"""
from __future__ import annotations

import contextlib
import gc
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchlet import running
from torchlet.contract import BLOCK_SIZE, MAX_LEN, NUM_BLOCKS, PREFIX_CACHE, REQUEST_STATES

from .drive import (check_counts, run_generate, run_steps, run_stream, sync,  # noqa: F401
                          warm_up)
from .workloads import Workload, random_checkpoint

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
    wishes: dict = field(default_factory=dict)  # role -> value, to the option playing the role
    named: dict = field(default_factory=dict)   # option name -> value, where a version declares it
    generate_batch: bool = False
    progress: bool = True
    threads: int | None = None


def load_version(name: str, root: str | None):
    import implementations
    return implementations.load(name, Path(root).resolve() if root else implementations.REFERENCE_ROOT)


def build_options(version, wishes: dict, named: dict | None = None,
                  workload: Workload | None = None) -> dict:
    """What to build `version` with, read from the options it declares (version.options): a
    wish, keyed by a contract role (MAX_RUNNING, MAX_STEP_TOKENS, ...), goes to the option that
    plays that role; a named option (--build-opt) to a version that declares that name; nothing
    else. MAX_LEN and NUM_BLOCKS, where a version has them and they weren't given, are sized
    from the workload so that every request fits at once."""
    declared = {o.name for o in version.options}
    options = version.options_by_role(wishes)
    options.update({k: v for k, v in (named or {}).items() if k in declared})
    if workload is None:
        return options
    lengths = [len(p) + n for p, n in zip(workload.prompts, workload.output_lens)]
    max_len, num_blocks = version.option_for(MAX_LEN), version.option_for(NUM_BLOCKS)
    if max_len is not None:
        options.setdefault(max_len.name, max(lengths))
    if num_blocks is not None and num_blocks.name not in options:
        block = version.option_for(BLOCK_SIZE)  # a pool's blocks have a size: the spec checks it
        size = options.get(block.name, block.default)
        options[num_blocks.name] = 1 + sum(-(-n // size) for n in lengths)  # + the null block
    return options


def build_engine(version, checkpoint, device, dtype, wishes: dict, workload: Workload | None,
                 named: dict | None = None):
    """The engine and the options it was built with (build_options)."""
    options = build_options(version, wishes, named, workload)
    return version.build(checkpoint, device=device, dtype=dtype, **options), options


@contextlib.contextmanager
def frozen_heap():
    """The timed run inside, with what earlier work left collected first and every object alive
    then (the engines built so far, the warm-up's survivors) frozen: a full collection during
    the run scans only what the run made. Measured on a CPU with the benches' workloads on a
    shrunk model: nano-vllm's timed run (v20) met one gen-2 collection of 82.5 ms (`python
    docs/probes/mixed_gc.py --workload`), and bench mixed's v15 after v14 in one process one of
    106-110 ms (`python docs/probes/mixed_gc.py v14_overlap v15_chunked_prefill`), near the whole
    of v15's ITL maximum on an H100 there (102.75 ms; 27.9 ms run alone). gc.unfreeze thaws
    every frozen object, whoever froze it."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_job(job: Job) -> dict:
    """Build the version, warm it up, run the workload; one row of results."""
    if job.threads:
        torch.set_num_threads(job.threads)
    version = load_version(job.version, job.root)
    dtype = getattr(torch, job.dtype)
    checkpoint = job.model.checkpoint(job.device, dtype)
    cuda = job.device.startswith("cuda")
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with running.kernels_off(job.device, interpret=False):  # Triton layers choose at build
        engine, options = build_engine(version, checkpoint, job.device, dtype, job.wishes,
                                       job.workload, job.named)
    stepwise = REQUEST_STATES in version.capabilities
    mode = "step" if stepwise else ("generate" if job.generate_batch else "stream")
    # On a CPU, Triton layers run their PyTorch path, as torchlet generate runs them: the
    # interpreter is for the specs, and timing it would time the interpreter.
    pytorch_layers = version.uses_triton and not cuda
    with running.kernels_off(job.device, interpret=False):
        warm_up(engine, job.workload, stepwise)
        cached = PREFIX_CACHE in version.capabilities
        before = engine.prefix_cache_stats() if cached else None
        runner = {"step": run_steps, "stream": run_stream, "generate": run_generate}[mode]
        with frozen_heap():
            cpu_start = time.process_time()
            row = runner(engine, job.workload, job.device, job.progress)
    # Host CPU seconds of the run: on a shared machine, less disturbed by other work than wall
    # time (with one thread, wall time minus this is mostly time spent waiting for a core).
    row["cpu_s"] = time.process_time() - cpu_start
    if cuda:
        peak = torch.cuda.max_memory_allocated() / 1e6
    else:  # ru_maxrss is in KiB on Linux
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) * 1024 / 1e6
    row.update(prefix_stats(before, engine.prefix_cache_stats() if cached else None))
    del engine
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    check_counts(row, job.workload)
    row["total_tok_s"] = (job.workload.prompt_tokens + row["output_tokens"]) / row["wall_s"]
    return {"version": version.name, "mode": mode, "kernels_off": pytorch_layers,
            "device": job.device, "dtype": job.dtype,
            "build_options": options, "requests": job.workload.num_requests,
            "prompt_tokens": job.workload.prompt_tokens,
            "expected_output_tokens": job.workload.output_tokens,
            "peak_memory_mb": peak, "memory_measure": MEMORY_MEASURES["cuda" if cuda else "cpu"],
            **row}


def prefix_stats(before: dict | None, after: dict | None) -> dict:
    """What the measured run added to the engine's prefix cache counters (they count from build,
    the warm-up included); all None for a version without a prefix cache."""
    if after is None:
        return {"prefix_hit_tokens": None, "prefix_queried_tokens": None,
                "prefix_evictions": None, "prefix_hit_rate": None}
    hit, queried, evictions = (after[k] - before[k]
                               for k in ("hit_tokens", "queried_tokens", "evictions"))
    return {"prefix_hit_tokens": hit, "prefix_queried_tokens": queried,
            "prefix_evictions": evictions, "prefix_hit_rate": hit / queried if queried else None}


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
            rate = row.get("prefix_hit_rate")
            hits = "" if rate is None else f", prefix hit rate {rate:.1%}"
            log(f"{row['version']}: {row['wall_s']:.2f} s, {row['output_tok_s']:.1f} output "
                f"tok/s{hits}")
        except Exception as e:  # noqa: BLE001  (any failure is reported in the table)
            row = {"version": job.version, "error": f"{type(e).__name__}: {e}"}
            log(f"{job.version}: failed: {row['error']}")
        rows.append(row)
    return rows


def median_runs(runs: list[dict]) -> list[dict]:
    """One row per version: its median run (of an even count, the faster middle one), with
    every run's wall time in run order; a version whose every run failed keeps its first error."""
    by_version: dict[str, list[dict]] = {}
    for run in runs:
        by_version.setdefault(run["version"], []).append(run)
    rows = []
    for version_runs in by_version.values():
        ok = sorted((r for r in version_runs if "error" not in r), key=lambda r: r["wall_s"])
        if not ok:
            rows.append(version_runs[0])
            continue
        row = dict(ok[(len(ok) - 1) // 2])
        if len(version_runs) > 1:
            row["wall_s_runs"] = [r["wall_s"] for r in version_runs if "error" not in r]
            row["failed_runs"] = len(version_runs) - len(ok)
        rows.append(row)
    return rows
