"""One version built and run on a workload, in a process of its own or here.

Build options are discovered from each version's build signature, never assumed: a version gets
only the options it names (or inherits through **options), and sizes it needs are derived from
the workload.
"""
from __future__ import annotations

import gc
import inspect
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from torchlet.contract import REQUEST_STATES

from .bench_drive import (check_counts, run_generate, run_steps, run_stream, sync,  # noqa: F401
                          warm_up)
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
    return implementations.load(name, Path(root).resolve() if root else implementations.REFERENCE_ROOT)


# Names a version might give the longest sequence it must hold (v05's slots reserve that many
# rows each); set to the workload's longest request when build accepts one and none is wished.
LENGTH_OPTIONS = ("max_len", "max_seq_len", "max_model_len", "max_context", "max_length")


def named_options(build) -> set[str]:
    params = inspect.signature(build).parameters
    return {n for n, p in params.items()
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)} - {"checkpoint"}


def accepted_options(version) -> set[str]:
    """Options a version's build names; a build that forwards **options to the version it builds
    on (v09 -> v08) also takes what its predecessors' builds name."""
    import implementations

    build = version.package.build
    names = named_options(build)
    if any(p.kind == p.VAR_KEYWORD for p in inspect.signature(build).parameters.values()):
        tree = sys.modules[version.package.__name__.rpartition(".")[0]]
        for other in implementations.discover(Path(tree.__file__).parent):
            if set(other.capabilities) < set(version.capabilities) and hasattr(other.package, "build"):
                names |= named_options(other.package.build)
    return names


def build_options(version, wishes: dict, workload: Workload | None = None) -> dict:
    """The wished options that the version's build takes (a version refuses what it doesn't
    know). Sizes it needs and wasn't given (num_blocks, the longest sequence) are derived from
    the workload so that every request fits at once."""
    named = accepted_options(version)
    options = {k: v for k, v in wishes.items() if k in named and v is not None}
    if workload is None:
        return options
    longest = max(len(p) + n for p, n in zip(workload.prompts, workload.output_lens))
    for name in LENGTH_OPTIONS:
        if name in named and name not in options:
            options[name] = longest
    if "num_blocks" in named and "num_blocks" not in options:
        size = options.get("block_size") or block_size_default(version)
        options["num_blocks"] = 1 + sum(-(-(len(p) + n) // size)
                                        for p, n in zip(workload.prompts, workload.output_lens))
    return options


def block_size_default(version) -> int:
    param = inspect.signature(version.package.build).parameters.get("block_size")
    if param is None or param.default is inspect.Parameter.empty:
        return 16  # what v08 defaults to; a forwarding build (v09, v10) inherits it
    return param.default


def build_engine(version, checkpoint, device, dtype, wishes: dict, workload: Workload | None):
    """The engine and the options it was built with. Options inherited through **options are a
    guess; if the build refuses one, it is built again with only what it names itself."""
    options = build_options(version, wishes, workload)
    try:
        return version.build(checkpoint, device=device, dtype=dtype, **options), options
    except TypeError:
        own = named_options(version.package.build)
        if set(options) <= own:
            raise
        options = {k: v for k, v in options.items() if k in own}
        return version.build(checkpoint, device=device, dtype=dtype, **options), options


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
    engine, options = build_engine(version, checkpoint, job.device, dtype, job.wishes, job.workload)
    stepwise = REQUEST_STATES in version.capabilities
    mode = "step" if stepwise else ("generate" if job.generate_batch else "stream")
    warm_up(engine, job.workload, stepwise)
    runner = {"step": run_steps, "stream": run_stream, "generate": run_generate}[mode]
    cpu_start = time.process_time()
    row = runner(engine, job.workload, job.device, job.progress)
    # Host CPU seconds of the run: on a shared machine, less disturbed by other work than wall
    # time (with one thread, wall time minus this is mostly time spent waiting for a core).
    row["cpu_s"] = time.process_time() - cpu_start
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
