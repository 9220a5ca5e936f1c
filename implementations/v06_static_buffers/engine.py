"""v05's engine over the static-buffer runner; it adds decode_buffers() to the contract. The
build is v05's, with the same options, given this version's runner and engine."""
from __future__ import annotations

from functools import partial

import torch

from ..v05_decode_slots import SlotEngine, slot_build
from .runner import StaticRunner


class StaticEngine(SlotEngine):
    def decode_buffers(self) -> dict[str, torch.Tensor]:
        """The tensors every decode step reads its inputs from: the same objects, addresses,
        shapes and dtypes at every step."""
        return dict(self.runner.buffers.device_tensors)


build = partial(slot_build, "v06", StaticRunner, StaticEngine)
