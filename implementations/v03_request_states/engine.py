"""The step-wise engine: requests are added, advanced one step at a time, read and aborted. The
scheduler decides, the runner computes logits, the engine passes tokens between them and frees a
request's cache the step it finishes."""
from __future__ import annotations

import itertools
from typing import Iterator

import torch

from torchlet.contract import (Checkpoint, GenerationParams, RequestError, RequestOutput,
                               check_prompts, check_request)

from ..v02_kv_cache.runner import ModelRunner
from .request import Request
from .scheduler import Scheduler, StepStats


class StepEngine:
    def __init__(self, checkpoint: Checkpoint, device="cpu", dtype=torch.float32,
                 scheduler: Scheduler | None = None):
        self.config = checkpoint.config
        self.runner = ModelRunner(checkpoint, device, dtype)
        self.scheduler = scheduler or Scheduler()
        self.requests: dict[int, Request] = {}
        self._ids = itertools.count()

    # -- the step-wise API ---------------------------------------------------------------------
    def add_request(self, prompt: list[int], params: GenerationParams) -> int:
        return self._enqueue(self._checked(prompt, params), params)

    def _checked(self, prompt: list[int], params: GenerationParams) -> list[int]:
        """The prompt as a list of ints, or every RequestError add_request raises; changes
        nothing, so a call can check all its prompts before it queues any."""
        prompt = check_request(prompt, params, self.config)
        self.scheduler.policy.check(Request(-1, prompt, params))  # reads prompt and params only
        return prompt

    def _enqueue(self, prompt: list[int], params: GenerationParams) -> int:
        request = Request(next(self._ids), list(prompt), params)
        self.scheduler.add(request)
        self.requests[request.id] = request
        return request.id

    def step(self) -> list[RequestOutput]:
        batch = self.scheduler.schedule()
        if batch is None:
            return []
        for request in batch.prefill:
            self.runner.cache.allocate(request.id)
        logits = self.runner.extend([r.id for r in batch.requests], batch.chunks)
        for request in self.scheduler.postprocess(batch, logits.argmax(-1).tolist()):
            self.runner.cache.free(request.id)
        return [r.output() for r in batch.requests]

    def output(self, request_id: int) -> RequestOutput:
        return self._request(request_id).output()

    def abort(self, request_id: int) -> None:
        self.scheduler.abort(self._request(request_id))
        self.runner.cache.free(request_id)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def num_cached_tokens(self, request_id) -> int:
        return self.runner.cache.num_tokens(request_id)

    def total_cached_tokens(self) -> int:
        return self.runner.cache.total_tokens()

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
            while not all(self.requests[i].finished for i in ids):
                self.step()
            return [self.requests[i].tokens for i in ids]
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
                    return
                self.step()
        finally:  # a stream dropped half way stops its request
            self.abort(request_id)
            self.requests.pop(request_id, None)

    # -- the kv_cache capability: the runner driven directly, by caller-chosen ids -------------
    def prefill(self, request_ids: list, prompts: list[list[int]]) -> torch.Tensor:
        for p in prompts:
            check_request(p, GenerationParams(max_new_tokens=1), self.config)
        return self.runner.prefill(request_ids, prompts)

    def decode(self, request_ids: list, sequences: list[list[int]]) -> torch.Tensor:
        return self.runner.decode(request_ids, sequences)

    def cached_kv(self, request_id) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.runner.cached_kv(request_id)

    def release(self, request_id) -> None:
        self.runner.cache.free(request_id)

    def forward_ragged(self, token_ids: list[int], req_indptr: torch.Tensor) -> torch.Tensor:
        return self.runner.forward_ragged(token_ids, req_indptr)

    def logits(self, token_ids: list[int]) -> torch.Tensor:
        check_request(token_ids, GenerationParams(max_new_tokens=1), self.config)
        return self.runner.forward_ragged(token_ids, self.runner.model.req_indptr([len(token_ids)]))


def build(checkpoint: Checkpoint, *, device="cpu", dtype=torch.float32, **options):
    if options:
        raise TypeError(f"v03 takes no options, got {sorted(options)}")
    return StepEngine(checkpoint, device, dtype)
