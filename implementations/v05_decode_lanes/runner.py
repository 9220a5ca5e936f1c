"""The runner over decode lanes: prefill stays ragged and dynamic; a decode pass always has one
row per lane, whatever the number of running requests, so its shapes never change. A step runs
two passes: the decode of the running requests, then the prefill of the admitted ones."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from torchlet.contract import flatten

from ..v04_continuous_batching import ModelRunner


class LaneRunner:
    def __init__(self, checkpoint, device, dtype, model, kv, inputs, sampler):
        self.config = checkpoint.config
        self.device = torch.device(device)
        self.model, self.kv, self.inputs, self.sampler = model, kv, inputs, sampler
        self.weights = model.Weights.from_checkpoint(checkpoint, self.device, dtype)

    @classmethod
    def assemble(cls, a) -> "LaneRunner":
        return cls(a.checkpoint, a.device, a.dtype, a.model, a.kv, a.inputs, a.sampler)

    def run(self, batch) -> torch.Tensor:
        """Each request's next token on the device, in batch.requests order: the running ones'
        from the decode pass, then the admitted ones' from their prefill."""
        tokens = []
        if batch.decode:
            tokens.append(self.decode_tokens(batch.decode))
        if batch.prefill:
            tokens.append(self.prefill_tokens(batch))
        return tokens[0] if len(tokens) == 1 else torch.cat(tokens)

    def prefill_tokens(self, batch) -> torch.Tensor:
        """The prefill pass's tokens, in batch.prefill order: each request is given its lane,
        the sampler is told so, and draws from the logits of its last row."""
        logits = self.prefill(batch.prefill)
        self.sampler.bind(batch.prefill)
        return self.sampler.draw(logits, batch.prefill)

    @torch.inference_mode()
    def prefill(self, requests: Sequence) -> torch.Tensor:
        """Give each request a lane (and whatever else the K/V memory holds for it: place) and
        store its rows' K/V where the K/V memory says they go; float logits [B, vocab] of each
        last token."""
        self.kv.place(requests)
        indptr, ids = self.ragged_inputs([r.sequence for r in requests])
        hidden = self.model.forward_prefill(self.weights, ids, indptr,
                                            self.kv.destinations(requests), self.kv.kv)
        self.computed(requests)
        return self.last_logits(hidden, indptr)

    def decode(self, requests: Sequence) -> torch.Tensor:
        """Each request's last token at position len - 1: float logits [B, vocab]."""
        logits, _ = self.step_lanes(requests)
        return self.lane_rows(logits).float()

    def decode_tokens(self, requests: Sequence) -> torch.Tensor:
        """The decode pass's tokens, in the requests' order: drawn from their logits."""
        return self.sampler.draw(self.decode(requests), requests)

    @torch.inference_mode()
    def step_lanes(self, requests: Sequence) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One lane-shaped pass over the requests' lanes, each feeding the token at its position
        `computed` (one more row computed): logits [lanes, vocab] by lane, and draws by lane
        where the pass draws them (not here: None)."""
        logits = self.decode_step(*self.inputs.write(requests))
        for request in requests:
            request.computed += 1
        return logits, None

    def decode_step(self, *inputs: torch.Tensor) -> torch.Tensor:
        """One lane-shaped pass over the inputs' buffers (token ids, positions and active
        lanes here; inputs over another K/V memory add its fields): logits [lanes,
        vocab] in the model's dtype. Not cast to float: the greedy draw, the argmax, is the same
        on either, and at 256 lanes of a 151,936-token vocabulary in bfloat16 the cast moved
        234 MB a step, 0.11 ms on an H200 (docs/perf-notes.md). decode() casts the rows it
        returns; a sampler that filters the logits casts them first."""
        hidden = self.model.forward_decode(self.weights, *inputs, self.kv.kv)
        return self.model.lm_head(self.weights, hidden)

    @staticmethod
    def computed(requests: Sequence) -> None:
        """After a prefill: the requests' K/V holds their whole sequences."""
        for request in requests:
            request.computed = len(request.sequence)

    def ragged_inputs(self, chunks: Sequence[Sequence[int]]):
        """Rows as one ragged batch: (req_indptr, token ids), on the device."""
        indptr = self.model.req_indptr([len(c) for c in chunks], device=self.device)
        return indptr, self.host_longs(flatten(chunks)).to(self.device)

    @staticmethod
    def host_longs(values: Sequence[int]) -> torch.Tensor:
        """A host int64 tensor of these ints, through numpy: torch.tensor converts a list
        element by element, 0.76 ms for a prefill's 16,000 ids here, numpy a quarter of that."""
        return torch.from_numpy(np.fromiter(values, np.int64, len(values)))

    def last_logits(self, hidden: torch.Tensor, indptr: torch.Tensor) -> torch.Tensor:
        """Float logits [B, vocab] of each request's last row of a ragged pass."""
        return self.model.lm_head(self.weights, hidden[self.model.last_rows(indptr)]).float()

    def lane_rows(self, t: torch.Tensor) -> torch.Tensor:
        """The rows of t [lanes, ...] that the lanes the inputs last wrote hold, in their
        requests' order."""
        return t.index_select(0, self.inputs.lanes)

    # The ragged passes without a cache read only the model, the weights and the device: v02's.
    forward_ragged, logits = ModelRunner.forward_ragged, ModelRunner.logits
