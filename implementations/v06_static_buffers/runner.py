"""v05's slot runner with static decode inputs: the decode step reads DecodeBuffers, allocated
once and written in place each step. Prefill stays ragged and dynamic."""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from ..v05_decode_slots import SlotRunner
from .buffers import DecodeBuffers


class StaticRunner(SlotRunner):
    def __init__(self, *args, **kwargs):
        """SlotRunner's arguments; the decode buffers are allocated here, once."""
        super().__init__(*args, **kwargs)
        self.buffers = self.make_buffers()

    def make_buffers(self) -> DecodeBuffers:
        """One lane per slot."""
        return DecodeBuffers(self.num_slots, self.device)

    def decode_inputs(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Write this step's lanes into the static buffers; returns those same buffers."""
        lanes = {self.cache.slot_of(r): (seq[-1], len(seq) - 1)
                 for r, seq in zip(request_ids, sequences, strict=True)}
        self.buffers.write(lanes, self.poison, self.config.vocab_size, self.cache.max_len)
        return self.buffers.tensors

    def staged(self, host: torch.Tensor) -> torch.Tensor:
        """v05's copy of a small host tensor (an index: the lanes' rows), staged as the inputs
        are: v05 copies from pageable memory, which makes the host wait for the GPU to finish
        the step; from pinned memory the copy waits for nothing."""
        if self.device.type != "cuda":
            return super().staged(host)
        # The pinned block is not reused before the copy is done (the caching host allocator
        # records the copy's stream).
        return host.pin_memory().to(self.device, non_blocking=True)
