"""v02's runner over requests: a step's batch is one mixed ragged pass, each request's new rows
after what it has cached, and the sampler it is given chooses each request's token."""
from __future__ import annotations

from typing import Sequence

import torch

from ..v02_kv_cache import ModelRunner
from .request import Request
from .scheduler import Batch


class StepRunner(ModelRunner):
    def __init__(self, checkpoint, device, dtype, model, kv, sampler):
        super().__init__(checkpoint, device, dtype, model, kv)
        self.sampler = sampler

    @classmethod
    def assemble(cls, a) -> "StepRunner":
        return cls(a.checkpoint, a.device, a.dtype, a.model, a.kv, a.sampler)

    def run(self, batch: Batch) -> torch.Tensor:
        """Each request's next token, in batch.requests order, on the device: the admitted
        requests take a cache, then one pass over every request's new rows."""
        for request in batch.prefill:
            self.kv.allocate(request.id)
        logits = self.rows(batch.requests, batch.chunks)
        return self.sampler.draw(logits, batch.requests)

    def prefill(self, requests: Sequence[Request]) -> torch.Tensor:
        """Requests without a cache take one and compute their whole sequence: float logits
        [B, vocab] of each last token."""
        for request in requests:
            self.kv.allocate(request.id)
        return self.rows(requests, [r.sequence for r in requests])

    def decode(self, requests: Sequence[Request]) -> torch.Tensor:
        """Each request's last token, all before it cached: float logits [B, vocab]."""
        return self.rows(requests, [[r.sequence[-1]] for r in requests])

    def rows(self, requests: Sequence[Request], chunks: Sequence[Sequence[int]]) -> torch.Tensor:
        """v02's pass over these new rows; each request then holds its whole sequence's K/V."""
        logits = self.extend([r.id for r in requests], chunks)
        for request in requests:
            request.computed = len(request.sequence)
        return logits
