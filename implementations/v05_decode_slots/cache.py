"""Decode slots and the K/V memory behind them. A request takes the lowest free slot when it is
prefilled and keeps it until it finishes; its K/V rows live in that slot. Each slot reserves
max_len rows whatever the request uses: the waste v08's paging removes."""
from __future__ import annotations

from typing import Hashable

import torch

from torchlet.contract import ModelConfig, RequestError


class SlotCache:
    def __init__(self, config: ModelConfig, num_slots: int, max_len: int, device, dtype):
        if num_slots < 1:
            raise RequestError(f"max_decode_slots must be at least 1, got {num_slots}")
        # One more slot than lanes: the sink that inactive decode lanes write into.
        shape = (num_slots + 1, max_len, config.num_kv_heads, config.head_dim)
        self.kv = [(torch.zeros(shape, device=device, dtype=dtype),
                    torch.zeros(shape, device=device, dtype=dtype))
                   for _ in range(config.num_layers)]
        self.num_slots, self.max_len = num_slots, max_len
        self._slot: dict[Hashable, int] = {}
        self._length: dict[Hashable, int] = {}

    def assign(self, request_id: Hashable) -> int:
        if request_id in self._slot:
            raise RequestError(f"request {request_id!r} already holds slot {self._slot[request_id]}")
        taken = set(self.slots_in_use())
        free = [s for s in range(self.num_slots) if s not in taken]
        if not free:
            raise RequestError(f"all {self.num_slots} decode slots are taken")
        self._slot[request_id], self._length[request_id] = free[0], 0
        return free[0]

    def slot_of(self, request_id: Hashable) -> int | None:
        return self._slot.get(request_id)

    def __contains__(self, request_id: Hashable) -> bool:
        return request_id in self._slot

    def num_free(self) -> int:
        return self.num_slots - len(self._slot)

    def num_tokens(self, request_id: Hashable) -> int:
        return self._length.get(request_id, 0)

    def set_tokens(self, request_id: Hashable, n: int) -> None:
        self._length[request_id] = n

    def total_tokens(self) -> int:
        return sum(self._length.values())

    def slots_in_use(self) -> list[int]:
        return list(self._slot.values())

    def free(self, request_id: Hashable) -> None:
        self._slot.pop(request_id, None)
        self._length.pop(request_id, None)

    def kv_of(self, request_id: Hashable) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of the request's rows: per layer (k, v), each [tokens, KV, D]."""
        s, n = self._slot[request_id], self._length[request_id]
        return [(k[s, :n].clone(), v[s, :n].clone()) for k, v in self.kv]
