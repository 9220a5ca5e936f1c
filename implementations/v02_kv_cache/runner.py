"""The model runner: owns the weights and the K/V cache, turns (request, new tokens) pairs into
logits. It knows nothing of requests' lifecycles; whoever drives it says which request gets which
tokens."""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from torchlet.contract import Checkpoint, RequestError, flatten

from ..v01_1_split_gqa import RaggedEngine
from .model import CachedDecoder
from .kv import KVCache


class ModelRunner:
    def __init__(self, checkpoint: Checkpoint, device, dtype, model: CachedDecoder, kv: KVCache):
        self.config = checkpoint.config
        self.device = torch.device(device)
        self.model = model
        self.weights = model.Weights.from_checkpoint(checkpoint, self.device, dtype)
        self.kv = kv

    @classmethod
    def assemble(cls, a) -> "ModelRunner":
        return cls(a.checkpoint, a.device, a.dtype, a.model, a.kv)

    @torch.inference_mode()
    def extend(self, request_ids: Sequence[Hashable], chunks: Sequence[Sequence[int]]):
        """One forward pass: each request's chunk of new tokens follows what it has cached.
        Returns the float logits [B, vocab] of each request's last new token."""
        indptr = self.model.req_indptr([len(c) for c in chunks], device=self.device)
        ids = torch.tensor(flatten(chunks), dtype=torch.long, device=self.device)
        kv = [self.kv.layers_of(r) for r in request_ids]
        hidden = self.model.forward_cached(self.weights, ids, indptr, kv)
        return self.model.lm_head(self.weights, hidden[self.model.last_rows(indptr)]).float()

    def prefill(self, request_ids: Sequence[Hashable], prompts: Sequence[Sequence[int]]):
        taken = [r for r in request_ids if r in self.kv]
        if taken or len(set(request_ids)) != len(request_ids):
            raise RequestError(f"prefill needs distinct requests without a cache: {taken}")
        for r in request_ids:
            self.kv.allocate(r)
        return self.extend(request_ids, prompts)

    def decode(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        for r, seq in zip(request_ids, sequences, strict=True):
            if self.kv.num_tokens(r) != len(seq) - 1:
                raise RequestError(
                    f"request {r!r} has {self.kv.num_tokens(r)} cached tokens; decode needs "
                    f"all but the last of its {len(seq)} tokens cached")
        return self.extend(request_ids, [[seq[-1]] for seq in sequences])

    # v01_0's: a whole batch, and one sequence, no cache
    forward_ragged, logits = RaggedEngine.forward_ragged, RaggedEngine.logits

