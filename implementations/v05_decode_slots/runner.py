"""The model runner over decode slots: prefill stays ragged and dynamic; a decode pass always has
one lane per slot, whatever the number of running requests, so its shapes never change."""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np
import torch

from torchlet.contract import Checkpoint, RequestError, flatten

from ..v04_continuous_batching import ModelRunner
from .model import SlotDecoder, layers
from .cache import SlotCache


class SlotRunner:
    def __init__(self, checkpoint: Checkpoint, device="cpu", dtype=torch.float32,
                 max_len: int | None = None,
                 num_slots: int = 8, poison_inactive_lanes: bool = False, *,
                 model: SlotDecoder = layers):
        self.config = checkpoint.config
        self.device = torch.device(device)
        self.model = model  # the decoder every pass calls
        self.weights = model.Weights.from_checkpoint(checkpoint, self.device, dtype)
        self.cache = self.make_cache(num_slots, max_len or self.config.max_position, dtype)
        # Garbage for inactive lanes, to show they cannot leak into active ones (spec only).
        self.poison = torch.Generator().manual_seed(0) if poison_inactive_lanes else None

    def make_cache(self, num_slots: int, max_len: int, dtype) -> SlotCache:
        """The K/V memory: num_slots slots of max_len rows each."""
        return SlotCache(self.config, num_slots, max_len, self.device, dtype)

    @property
    def num_slots(self) -> int:
        return self.cache.num_slots

    def check_new(self, request_ids: Sequence[Hashable]) -> None:
        """RequestError unless the requests are distinct and none holds a cache yet."""
        taken = [r for r in request_ids if r in self.cache]
        if taken or len(set(request_ids)) != len(request_ids):
            raise RequestError(f"prefill needs distinct requests without a cache: {taken}")

    def ragged_inputs(self, prompts: Sequence[Sequence[int]]):
        """The prompts as one ragged batch: (req_indptr, token ids), on the device."""
        indptr = self.model.req_indptr([len(p) for p in prompts], device=self.device)
        return indptr, self.host_longs(flatten(prompts)).to(self.device)

    def host_longs(self, values: Sequence[int]) -> torch.Tensor:
        """A host int64 tensor of these ints, through numpy: torch.tensor converts a list
        element by element, 0.76 ms for a prefill's 16,000 ids here, numpy a quarter of that."""
        return torch.from_numpy(np.fromiter(values, np.int64, len(values)))

    def last_logits(self, hidden: torch.Tensor, indptr: torch.Tensor) -> torch.Tensor:
        """Float logits [B, vocab] of each request's last row of a ragged pass."""
        return self.model.lm_head(self.weights, hidden[self.model.last_rows(indptr)]).float()

    @torch.inference_mode()
    def prefill(self, request_ids: Sequence[Hashable], prompts: Sequence[Sequence[int]]):
        """Give each request a slot and fill its rows; float logits [B, vocab] of each last token."""
        self.check_new(request_ids)
        if len(request_ids) > self.cache.num_free():
            raise RequestError(f"{len(request_ids)} requests to prefill but only "
                               f"{self.cache.num_free()} free decode slots")
        slots = [self.cache.assign(r) for r in request_ids]
        indptr, ids = self.ragged_inputs(prompts)
        hidden = self.model.forward_prefill(self.weights, ids, indptr, slots, self.cache.kv)
        for r, p in zip(request_ids, prompts):
            self.cache.set_tokens(r, len(p))
        return self.last_logits(hidden, indptr)

    def decode_inputs(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Slot-shaped inputs: lane s carries the request in slot s, inactive lanes dummies."""
        n = self.num_slots
        token_ids = torch.zeros(n, dtype=torch.long)
        positions = torch.zeros(n, dtype=torch.long)
        active = torch.zeros(n, dtype=torch.bool)
        if self.poison is not None:
            token_ids = torch.randint(0, self.config.vocab_size, (n,), generator=self.poison)
            positions = torch.randint(0, self.cache.max_len, (n,), generator=self.poison)
        for r, seq in zip(request_ids, sequences, strict=True):
            s = self.cache.slot_of(r)
            token_ids[s], positions[s], active[s] = seq[-1], len(seq) - 1, True
        return (token_ids.to(self.device), positions.to(self.device), active.to(self.device))

    def check_decode(self, request_ids: Sequence[Hashable],
                     sequences: Sequence[Sequence[int]]) -> None:
        """RequestError unless each request has cached all but the last of its tokens."""
        for r, seq in zip(request_ids, sequences, strict=True):
            if r not in self.cache or self.cache.num_tokens(r) != len(seq) - 1:
                raise RequestError(
                    f"request {r!r} has {self.cache.num_tokens(r)} cached tokens; decode needs "
                    f"all but the last of its {len(seq)} tokens cached")

    @torch.inference_mode()
    def decode(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Each request's last token at position len - 1; float logits [B, vocab]."""
        self.check_decode(request_ids, sequences)
        logits = self.decode_step(*self.decode_inputs(request_ids, sequences))
        for r in request_ids:
            self.cache.set_tokens(r, self.cache.num_tokens(r) + 1)
        return self.lane_rows(logits, request_ids)

    def lane_rows(self, t: torch.Tensor, request_ids: Sequence[Hashable]) -> torch.Tensor:
        """The rows of t [lanes, ...] that these requests' lanes hold, in their order."""
        return t.index_select(0, self.staged(self.lane_index(request_ids)))

    def staged(self, host: torch.Tensor) -> torch.Tensor:
        """A small host tensor (an index) on the device."""
        return host.to(self.device)

    def lane_index(self, request_ids: Sequence[Hashable]) -> torch.Tensor:
        """The requests' lanes, in their order: a long tensor on the host. Made through numpy:
        torch makes a tensor of a Python list (or indexes with one) element by element, which at
        hundreds of lanes cost more than the rest of the indexing."""
        return self.host_longs([self.cache.slot_of(r) for r in request_ids])

    def decode_step(self, token_ids, positions, active) -> torch.Tensor:
        """One slot-shaped pass: float logits [slots, vocab]."""
        hidden = self.model.forward_decode(self.weights, token_ids, positions, active, self.cache.kv)
        return self.model.lm_head(self.weights, hidden).float()

    # The ragged pass without a cache reads only the model, the weights and the device: v02's.
    forward_ragged = ModelRunner.forward_ragged

    def cached_kv(self, request_id: Hashable) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if request_id not in self.cache:
            raise RequestError(f"request {request_id!r} has no cache")
        return self.cache.kv_of(request_id)
