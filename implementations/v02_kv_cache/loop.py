"""Greedy generation with a K/V cache: one prefill pass over all prompts, then one decode pass
per new token that feeds each unfinished request only its newest token."""
from __future__ import annotations

import itertools
from typing import Hashable

import torch

from torchlet.contract import GenerationParams, check_request

from ..v01_1_split_gqa import RaggedEngine
from .runner import ModelRunner


class CacheEngine:
    def __init__(self, runner: ModelRunner, kv):
        self.config = runner.config
        self.runner, self.kv = runner, kv
        self._calls = itertools.count()  # generate's own cache keys, apart from callers' ids

    @classmethod
    def assemble(cls, a) -> "CacheEngine":
        return cls(a.runner, a.kv)

    # The kv_cache capability: the runner's prefill/decode, for callers that drive it directly.
    def prefill(self, request_ids: list[Hashable], prompts: list[list[int]]) -> torch.Tensor:
        for p in prompts:
            check_request(p, GenerationParams(max_new_tokens=1), self.config)
        return self.runner.prefill(request_ids, prompts)

    def decode(self, request_ids: list[Hashable], sequences: list[list[int]]) -> torch.Tensor:
        return self.runner.decode(request_ids, sequences)

    def cached_kv(self, request_id: Hashable) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.kv.kv_of(request_id)

    def num_cached_tokens(self, request_id: Hashable) -> int:
        return self.kv.num_tokens(request_id)

    def total_cached_tokens(self) -> int:
        return self.kv.total_tokens()

    def release(self, request_id: Hashable) -> None:
        self.kv.free(request_id)

    def forward_ragged(self, token_ids: list[int], req_indptr: torch.Tensor) -> torch.Tensor:
        return self.runner.forward_ragged(token_ids, req_indptr)

    def logits(self, token_ids: list[int]) -> torch.Tensor:
        return self.runner.logits(token_ids)

    # v01_0's loops over this engine's own _steps: prefill once, then decode.
    generate = RaggedEngine.generate
    stream = RaggedEngine.stream

    def _steps(self, prompts: list[list[int]], params: GenerationParams):
        """Yield {request index: new token} once per pass: the prefill, then each decode."""
        call = next(self._calls)
        keys = [("generate", call, i) for i in range(len(prompts))]
        sequences = [list(p) for p in prompts]
        live = list(range(len(prompts)))
        try:
            logits = self.runner.prefill(keys, sequences)
            while live:
                tokens = logits.argmax(-1).tolist()
                for i, token in zip(live, tokens):
                    sequences[i].append(token)
                yield dict(zip(live, tokens))
                done = [i for i in live if params.stops_at(sequences[i][-1])
                        or len(sequences[i]) - len(prompts[i]) >= params.max_new_tokens]
                for i in done:
                    self.kv.free(keys[i])
                live = [i for i in live if i not in done]
                if live:
                    logits = self.runner.decode([keys[i] for i in live],
                                                [sequences[i] for i in live])
        finally:  # a stream dropped half way must not keep its cache
            for key in keys:
                self.kv.free(key)

