"""The step-wise engine: requests are added, advanced one step at a time, read and aborted. The
scheduler decides, the runner computes logits, the engine passes tokens between them and frees a
request's cache the step it finishes."""
from __future__ import annotations

import itertools
from typing import Iterator

import torch

from torchlet.contract import (Checkpoint, GenerationParams, RequestError, RequestOutput,
                               check_prompts, check_request)

from ..v02_kv_cache import CacheEngine, ModelRunner
from .request import Request
from .scheduler import Batch, Scheduler, StepStats


class StepEngine(CacheEngine):
    """The step loop over two parts it is given: a runner (weights, K/V cache, forward passes)
    and a scheduler (who runs each step). The engine keeps the requests by id. From v02's
    CacheEngine: the kv_cache capability (prefill, decode, cached_kv, release, the cached-token
    counts, forward_ragged, logits), which drives the same runner directly; generate and stream
    are new, driven through the steps."""

    samples = False  # greedy only: check_request refuses a request that samples

    def __init__(self, runner: ModelRunner, scheduler: Scheduler):  # given its runner, not v02's
        self.config = runner.config
        self.runner = runner
        self.scheduler = scheduler
        self.requests: dict[int, Request] = {}
        self._ids = itertools.count()

    # -- the step-wise API ---------------------------------------------------------------------
    def add_request(self, prompt: list[int], params: GenerationParams) -> int:
        return self._enqueue(self._checked(prompt, params), params)

    def _checked(self, prompt: list[int], params: GenerationParams) -> list[int]:
        """The prompt as a list of ints, or every RequestError add_request raises; changes
        nothing, so a call can check all its prompts before it queues any."""
        prompt = check_request(prompt, params, self.config, sampling=self.samples)
        self._check_fits(prompt, params)
        return prompt

    def _check_fits(self, prompt: list[int], params: GenerationParams) -> None:
        """Refuse a request this engine could never run: here, what the admission policy
        refuses (a prompt it could never admit)."""
        self.scheduler.policy.check(Request(-1, prompt, params))  # reads prompt and params only

    def _enqueue(self, prompt: list[int], params: GenerationParams) -> int:
        request = Request(next(self._ids), list(prompt), params)
        self.scheduler.add(request)
        self.requests[request.id] = request
        return request.id

    def step(self) -> list[RequestOutput]:
        """Schedule, run the model, hand each request its token, free what finished."""
        batch = self._schedule()
        if batch is None:
            return []
        tokens = self._choose(batch, self._forward(batch))
        for request in self.scheduler.postprocess(batch, tokens):
            self.runner.cache.free(request.id)
        return [r.output() for r in batch.requests]

    def _choose(self, batch: Batch, logits: torch.Tensor) -> list[int]:
        """Each request's next token, in batch.requests order: greedy, the argmax."""
        return logits.argmax(-1).tolist()

    def _schedule(self) -> Batch | None:
        """This step's batch, as the scheduler picks it; None when nothing is left to run."""
        return self.scheduler.schedule()

    def _forward(self, batch: Batch) -> torch.Tensor:
        """One mixed ragged pass: the admitted requests take a cache, then every request's new
        rows follow what it has cached. Float logits [B, vocab] in batch.requests order."""
        for request in batch.prefill:
            self.runner.cache.allocate(request.id)
        return self.runner.extend([r.id for r in batch.requests], batch.chunks)

    def output(self, request_id: int) -> RequestOutput:
        return self._request(request_id).output()

    def abort(self, request_id: int) -> None:
        self.scheduler.abort(self._request(request_id))
        self.runner.cache.free(request_id)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def last_step_stats(self) -> StepStats | None:
        return self.scheduler.last_stats

    def _request(self, request_id: int) -> Request:
        if request_id not in self.requests:
            raise RequestError(f"unknown request id {request_id!r}")
        return self.requests[request_id]

    # -- generate and stream, driven through the steps ------------------------------------------
    def generate(self, prompts: list[list[int]], params: GenerationParams) -> list[list[int]]:
        prompts = [self._checked(p, params) for p in check_prompts(prompts)]  # all, then queue
        ids = [self._enqueue(p, params) for p in prompts]
        try:
            requests = [self.requests[i] for i in ids]
            while not all(r.finished for r in requests):
                self.step()
                for r in requests:  # a failed one fails the call at once
                    r.raise_if_failed()
            return [r.tokens for r in requests]
        finally:  # interrupted half way too: nothing of this call stays queued or cached
            for i in ids:
                self.abort(i)
                del self.requests[i]

    def stream(self, prompt: list[int], params: GenerationParams) -> Iterator[int]:
        request_id = self.add_request(prompt, params)
        request, sent = self.requests[request_id], 0
        try:
            while True:
                while sent < len(request.tokens):
                    sent += 1
                    yield request.tokens[sent - 1]
                if request.finished:
                    request.raise_if_failed()
                    return
                self.step()
        finally:  # a stream dropped half way stops its request
            self.abort(request_id)
            self.requests.pop(request_id, None)


def build(checkpoint: Checkpoint, *, device="cpu", dtype=torch.float32, **options):
    if options:
        raise TypeError(f"v03 takes no options, got {sorted(options)}")
    return StepEngine(ModelRunner(checkpoint, device, dtype), Scheduler())
