"""The step-wise engine: requests are added, advanced one step at a time, read and aborted. The
scheduler decides who runs, the runner computes their tokens (through the sampler it holds), and
the scheduler takes them back; the loop keeps the requests by id."""
from __future__ import annotations

import itertools
from typing import Iterator

import torch

from torchlet.contract import (GenerationParams, RequestError, RequestOutput, RequestState,
                               Served, check_prompts, check_request)

from ..v02_kv_cache import CacheEngine
from .request import Request
from .scheduler import Scheduler, StepStats

# What a request driven through the kv_cache capability asks for: its K/V, no tokens.
DIRECT = GenerationParams(max_new_tokens=1)


class StepEngine(CacheEngine):
    """The step loop over its parts: a runner, a scheduler, a sampler and the request class.
    From v02's CacheEngine: the kv_cache capability's reads (cached_kv, the cached-token counts,
    forward_ragged, logits); its prefill and decode drive requests through the same runner
    passes as the steps."""

    def __init__(self, runner, kv, scheduler: Scheduler, sampler, request: type[Request]):
        super().__init__(runner, kv)
        self.scheduler, self.sampler, self.request = scheduler, sampler, request
        self.requests: dict[int, Request] = {}
        self.direct: dict = {}  # the kv_cache capability's requests, by the caller's ids
        self._ids = itertools.count()

    @classmethod
    def assemble(cls, a) -> "StepEngine":
        return cls(a.runner, a.kv, a.scheduler, a.sampler, a.request)

    # What a part serves on the engine's behalf: a later version's capability adds methods to
    # the part whose idea it is (its SERVES names them), and the engine reads them there. An
    # engine whose part serves none of them has none of them (contract.Served).
    lane_of = Served("kv")  # decode_lanes
    num_lanes = Served("kv")
    decode_buffers = Served("runner.inputs")  # static_buffers
    graph_stats = Served("runner")  # graph_replay
    block_tables = Served("kv")  # paged_kv
    paged_metadata = Served("kv")
    pool_stats = Served("kv")
    kv_bytes = Served("kv")
    num_preemptions = Served("scheduler")
    sampling_buffers = Served("sampler")  # sampling
    prefix_cache_stats = Served("kv")  # prefix_cache
    cached_blocks = Served("kv")

    # -- the step-wise API ---------------------------------------------------------------------

    def add_request(self, prompt: list[int], params: GenerationParams) -> int:
        return self._enqueue(self._checked(prompt, params), params)

    def _checked(self, prompt: list[int], params: GenerationParams) -> list[int]:
        """The prompt as a list of ints, or every RequestError add_request raises: what
        check_request refuses, what the K/V memory could never hold, what the admission policy
        could never admit. Changes nothing, so a call can check all its prompts before it
        queues any."""
        prompt = check_request(prompt, params, self.config, sampling=self.sampler.samples,
                               grammar=self.sampler.constrains)
        self.kv.check(prompt, params)
        self.scheduler.check(self.request(-1, prompt, params))  # reads prompt and params
        return prompt

    def _enqueue(self, prompt: list[int], params: GenerationParams) -> int:
        request = self.request(next(self._ids), list(prompt), self.sampler.prepare(params))
        self.scheduler.add(request)
        self.requests[request.id] = request
        return request.id

    def step(self) -> list[RequestOutput]:
        """Schedule, run the batch to its tokens, hand each request its token (the finished
        ones free their K/V)."""
        batch = self.scheduler.schedule()
        if batch is None:
            return []
        return self.scheduler.postprocess(batch, self.runner.run(batch).tolist())

    def output(self, request_id: int) -> RequestOutput:
        return self._request(request_id).output()

    def take(self, request_id: int) -> RequestOutput:
        """output(), and a finished request leaves the engine: a long-running engine holds only
        the requests whose last output is still to be taken."""
        request = self._request(request_id)
        if request.finished:
            del self.requests[request_id]
        return request.output()

    def abort(self, request_id: int) -> None:
        self.scheduler.abort(self._request(request_id))

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def last_step_stats(self) -> StepStats | None:
        return self.scheduler.last_stats

    def _request(self, request_id: int) -> Request:
        if request_id not in self.requests:
            raise RequestError(f"unknown request id {request_id!r}")
        return self.requests[request_id]

    # -- the kv_cache capability, over requests ---------------------------------------------------

    def prefill(self, request_ids: list, prompts: list[list[int]]) -> torch.Tensor:
        prompts = [check_request(p, DIRECT, self.config) for p in prompts]
        taken = [r for r in request_ids if r in self.direct]
        if taken or len(set(request_ids)) != len(request_ids):
            raise RequestError(f"prefill needs distinct requests without a cache: {taken}")
        requests = [self.request(r, p, DIRECT) for r, p in zip(request_ids, prompts, strict=True)]
        for request in requests:
            request.state = RequestState.RUNNING
        logits = self.runner.prefill(requests)  # raises, holding nothing, if they do not fit
        self.direct.update((r.id, r) for r in requests)
        return logits

    def decode(self, request_ids: list, sequences: list[list[int]]) -> torch.Tensor:
        requests = []
        for r, sequence in zip(request_ids, sequences, strict=True):
            request = self.direct.get(r)
            if request is None:  # even a first token needs its prompt's K/V: prefill makes them
                raise RequestError(f"request {r!r} has no cache: prefill it first")
            cached = request.computed
            if cached != len(sequence) - 1:
                raise RequestError(f"request {r!r} has {cached} cached tokens; decode needs all "
                                   f"but the last of its {len(sequence)} tokens cached")
            requests.append(request)
        for request, sequence in zip(requests, sequences):
            request.sequence = list(sequence)
        return self.runner.decode(requests)

    def release(self, request_id) -> None:
        self.direct.pop(request_id, None)
        self.kv.free(request_id)

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

