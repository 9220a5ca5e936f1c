"""v05's engine over the static-buffer runner; it adds decode_buffers() to the contract."""
from __future__ import annotations

import itertools
from typing import Iterator

import torch

from torchlet.contract import (Checkpoint, GenerationParams, RequestError, RequestOutput,
                               check_prompts, check_request)

from ..v03_request_states.request import Request
from ..v03_request_states.scheduler import StepStats
from ..v04_continuous_batching.scheduler import ContinuousBatching, Scheduler
from ..v05_decode_slots.engine import DEFAULT_SLOTS
from .runner import StaticRunner


class StaticEngine:
    def __init__(self, runner: StaticRunner, scheduler: Scheduler):
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
        prompt = check_request(prompt, params, self.config)
        if len(prompt) + params.max_new_tokens > self.runner.cache.max_len:
            raise RequestError(
                f"prompt ({len(prompt)} tokens) + max_new_tokens ({params.max_new_tokens}) "
                f"exceeds max_model_len={self.runner.cache.max_len}, the rows a slot holds")
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
        logits = []
        if batch.decode:
            logits.append(self.runner.decode([r.id for r in batch.decode],
                                             [r.sequence for r in batch.decode]))
        if batch.prefill:
            logits.append(self.runner.prefill([r.id for r in batch.prefill],
                                              [r.prompt for r in batch.prefill]))
        logits = torch.cat(logits)  # batch.requests order: decode, then prefill
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

    def slot_of(self, request_id) -> int | None:
        """The decode slot the request holds, None while waiting or once finished."""
        return self.runner.cache.slot_of(request_id)

    @property
    def num_decode_slots(self) -> int:
        return self.runner.num_slots

    def decode_buffers(self) -> dict[str, torch.Tensor]:
        """The tensors every decode step reads its inputs from: the same objects, addresses,
        shapes and dtypes at every step."""
        return dict(self.runner.buffers.device_tensors)

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




def build(checkpoint: Checkpoint, *, device="cpu", dtype=torch.float32,
          max_decode_slots: int | None = None, max_running: int | None = None,
          max_step_tokens: int | None = None, max_model_len: int | None = None,
          poison_inactive_lanes: bool = False, **options):
    """The slots bound the running requests, so max_running (v04's name) is accepted as the slot
    count; max_step_tokens defaults to the model's context. poison_inactive_lanes fills idle lanes
    with random ids and positions."""
    if options:
        raise TypeError(f"v06 takes max_decode_slots (or max_running), max_step_tokens, "
                        f"max_model_len and "
                        f"poison_inactive_lanes, got {sorted(options)}")
    if max_decode_slots and max_running and max_decode_slots != max_running:
        raise TypeError(f"max_decode_slots={max_decode_slots} and max_running={max_running} "
                        f"disagree: the slots are the running requests")
    max_decode_slots = max_decode_slots or max_running or DEFAULT_SLOTS
    if max_model_len is not None and not 1 <= max_model_len <= checkpoint.config.max_position:
        raise TypeError(f"max_model_len must be in 1..{checkpoint.config.max_position}, "
                        f"got {max_model_len}")
    budget = max_step_tokens or max(checkpoint.config.max_position, max_decode_slots)
    runner = StaticRunner(checkpoint, device, dtype, max_model_len, max_decode_slots,
                         poison_inactive_lanes)
    return StaticEngine(runner, Scheduler(ContinuousBatching(max_decode_slots, budget)))
