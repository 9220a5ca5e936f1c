"""v13's decoder, whose prefill attention may be handed a slice pass's contexts as tensors: the
form a captured slice pass (slices.py) holds, since a graph cannot take a list of contexts whose
count and lengths change at every step."""
from __future__ import annotations

from typing import NamedTuple

import torch

from ..v14_overlap import FusedContextAttention, FusedOps, PagedDecoder

__all__ = ["PackedContext", "SliceAttention", "layers"]


class PackedContext(NamedTuple):
    """Every request's context slots in one tensor: request r's are slots[starts[r] ..
    starts[r + 1]] (int64 on the device); max_len bounds every context (a host int: with the
    row count it sizes the kernel's grid)."""
    slots: torch.Tensor
    starts: torch.Tensor
    max_len: int


class SliceAttention(FusedContextAttention):
    """v13's memory; a prefill's contexts may come packed (PackedContext), the pass's row indptr
    then int64."""

    def attend_context(self, qg: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       indptr: torch.Tensor, context) -> torch.Tensor:
        if not isinstance(context, PackedContext):
            return super().attend_context(qg, k_cache, v_cache, indptr, context)
        return self.attend_slots(qg, k_cache, v_cache, indptr, context.slots, context.starts,
                                 context.max_len)


layers = PagedDecoder()  # v08's decoder, composing v13's ops and this memory
layers.ops, layers.Memory = FusedOps(), SliceAttention
