"""The engine's loop, in one background thread.

An engine is not thread-safe, and a step blocks for as long as its forward pass takes, so one
thread owns the engine and nothing else touches it. Handlers reach it through a queue of
messages (add a request, abort one, stop); the thread takes every waiting message between two
steps, so an abort lands before the next step. Each request carries `emit`, which the thread
calls with the request's events: ("added", id), ("refused", message), ("tokens", [ids]),
("end", reason, error). The app's emit hands them to the event loop (call_soon_threadsafe).

The engine is reached only through the step API (add_request, step, abort, has_unfinished,
last_step_stats) and, where its version has them, pool_stats, block_tables,
prefix_cache_stats, cached_blocks and speculation_stats: every version from v03 on can serve.
"""
from __future__ import annotations

import collections
import contextlib
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from torchlet.contract import (PAGED_KV, PREFIX_CACHE, SPECULATIVE, FinishReason,
                               GenerationParams, RequestState, TorchletError)

# What the client is told for each way a request ends.
REASONS = {FinishReason.EOS: "stop", FinishReason.STOP: "stop", FinishReason.LENGTH: "length",
           FinishReason.ABORTED: "aborted", FinishReason.ERROR: "error"}
SNAPSHOT_EVERY = 0.05  # s: the page and /metrics read a snapshot at most this old while busy
HISTORY = 24           # steps the page shows
RATE_WINDOW = 5.0      # s of tokens tokens/s is averaged over


@dataclass(eq=False)
class Job:
    """One request as the thread sees it: what to run, where its events go, its timings."""

    prompt: list[int]
    params: GenerationParams
    emit: Callable[[tuple], None]
    arrived: float = field(default_factory=time.perf_counter)
    request_id: int | None = None
    sent: int = 0                 # tokens emitted so far
    last: float | None = None     # when the latest token was emitted


class Worker:
    """Owns the engine and its thread. metrics (torchlet/serve/metrics.py) is told of each
    token and each end; listeners are called, in the thread, with each new snapshot."""

    def __init__(self, engine, capabilities, metrics=None, context=None):
        self.engine, self.metrics = engine, metrics
        self.context = context  # a context manager the loop runs in (kernels_off on a CPU)
        self.paged, self.prefix = PAGED_KV in capabilities, PREFIX_CACHE in capabilities
        self.speculative = SPECULATIVE in capabilities
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.jobs: dict[int, Job] = {}
        self.steps: collections.deque = collections.deque(maxlen=HISTORY)
        self.rates: collections.deque = collections.deque()  # (time, tokens) of recent steps
        self.finished: collections.Counter = collections.Counter()
        self.listeners: list[Callable[[dict], None]] = []
        self.snapshot: dict[str, Any] = {}
        self.taken = 0.0
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, name="torchlet-engine", daemon=True)
        self._snap()

    # -- what handlers call, from any thread --------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def submit(self, job: Job) -> None:
        self.inbox.put(("add", job))

    def cancel(self, job: Job, reason: str = "aborted") -> None:
        """Aborts the request if it still runs; `reason` is what it ended by (a stop string
        found in its text: "stop")."""
        self.inbox.put(("abort", (job, reason)))

    def stop(self, why: str) -> None:
        """Ends every request with ("end", "shutdown", why), then the thread."""
        self.inbox.put(("stop", why))

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    # -- the thread -----------------------------------------------------------------------------

    def _loop(self) -> None:
        with self.context() if self.context else contextlib.nullcontext():
            while True:
                busy = self.engine.has_unfinished()
                if not self._take(block=not busy):
                    return
                if self.engine.has_unfinished():
                    self._step()
                self._snap(force=not self.engine.has_unfinished())

    def _take(self, block: bool) -> bool:
        """Handles the waiting messages (waits for one when idle); False once told to stop."""
        try:
            message = self.inbox.get() if block else self.inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            kind, arg = message
            if kind == "add":
                self._add(arg)
            elif kind == "abort":
                self._abort(*arg, None)
            else:
                for job in list(self.jobs.values()):
                    self._abort(job, "shutdown", arg)
                self.stopped = True
                self._snap(force=True)
                return False
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return True

    def _add(self, job: Job) -> None:
        if self.stopped:
            job.emit(("end", "shutdown", "the server is shutting down"))
            return
        try:
            job.request_id = self.engine.add_request(job.prompt, job.params)
        except TorchletError as e:  # RequestError: refused, nothing queued
            job.emit(("refused", str(e)))
            return
        self.jobs[job.request_id] = job
        job.emit(("added", job.request_id))

    def _abort(self, job: Job, reason: str, error: str | None) -> None:
        if self.jobs.get(job.request_id) is not job:
            return  # never added, or already ended
        self.engine.abort(job.request_id)
        self._end(job, reason, error)

    def _end(self, job: Job, reason: str, error: str | None) -> None:
        del self.jobs[job.request_id]
        self.engine.take(job.request_id)  # finished and taken: it leaves the engine
        self.finished[reason] += 1
        if self.metrics:
            self.metrics.ended(reason)
        job.emit(("end", reason, error))

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as e:  # a broken engine: each request is told, the server goes on
            print(f"torchlet serve: a step failed: {type(e).__name__}: {e}", file=sys.stderr)
            for job in list(self.jobs.values()):
                self._abort(job, "error", f"{type(e).__name__}: {e}")
            return
        now, made = time.perf_counter(), 0
        for out in outputs:
            job = self.jobs.get(out.request_id)
            if job is None:
                continue
            new = out.tokens[job.sent:]
            if new:
                made += len(new)
                if self.metrics:
                    self.metrics.tokens(now - (job.last or job.arrived), len(new),
                                        first=job.sent == 0)
                job.sent, job.last = len(out.tokens), now
                job.emit(("tokens", list(new)))
            if out.state is RequestState.FINISHED:
                self._end(job, REASONS.get(out.finish_reason, "error"), out.error)
        self.rates.append((now, made))
        stats = self.engine.last_step_stats()
        if stats is not None:
            self.steps.append({"step": stats.step, "prefill": list(stats.prefill_ids),
                               "decode": list(stats.decode_ids),
                               "prefill_tokens": stats.num_prefill_tokens})

    def _snap(self, force: bool = False) -> None:
        """A new snapshot of the engine for readers outside the thread, at most every
        SNAPSHOT_EVERY seconds unless forced (when idle, so that one is never stale)."""
        now = time.perf_counter()
        if not force and now - self.taken < SNAPSHOT_EVERY:
            return
        self.taken = now
        while self.rates and self.rates[0][0] < now - RATE_WINDOW:
            self.rates.popleft()
        span = now - self.rates[0][0] if len(self.rates) > 1 else 0.0
        stats = self.engine.last_step_stats()
        waiting = set(stats.waiting_ids) if stats is not None else set()
        ids = sorted(self.jobs)
        # a request added since the last step has not been scheduled: it waits too
        waiting |= {i for i in ids if self.jobs[i].sent == 0 and (stats is None or (
            i not in stats.prefill_ids and i not in stats.decode_ids))}
        snapshot = {
            "step": stats.step if stats is not None else 0,
            "waiting": [i for i in ids if i in waiting],
            "running": [i for i in ids if i not in waiting],
            "finished": dict(self.finished),
            "steps": list(self.steps),
            "tokens_per_second": sum(n for _, n in self.rates) / span if span > 0 else 0.0,
            "pool": self.engine.pool_stats() if self.paged else None,
            "tables": ({str(r): list(t) for r, t in self.engine.block_tables().items()}
                       if self.paged else None),
            "prefix": self.engine.prefix_cache_stats() if self.prefix else None,
            "cached": self.engine.cached_blocks() if self.prefix else None,
            # counted since the build, guesses or none (speculative_tokens=0 counts no pass)
            "speculation": self.engine.speculation_stats() if self.speculative else None,
            "stopped": self.stopped,
        }
        self.snapshot = snapshot
        for listener in self.listeners:
            listener(snapshot)

