"""Paged K/V memory: a block pool and, per layer, one cache tensor of num_blocks blocks. A request
holds the blocks its tokens need (ceil(tokens / block_size)), no more; its decode lane (a slot
as in v05, for the fixed-shape decode step) holds no memory at all."""
from __future__ import annotations

from typing import Hashable

import torch

from torchlet.contract import ModelConfig, RequestError

from .block_pool import BlockPool


class PagedCache:
    def __init__(self, config: ModelConfig, num_lanes: int, num_blocks: int, block_size: int,
                 max_len: int, device, dtype, poison_free_blocks: bool = False):
        self.pool = self.make_pool(num_blocks, block_size)
        shape = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
        # Poisoned, every block starts as NaN (none is owned yet): a read of a slot that no live
        # request wrote shows up in its logits instead of passing for a plausible value.
        self.poison_free_blocks = poison_free_blocks
        fill = float("nan") if poison_free_blocks else 0.0
        self.kv = [(torch.full(shape, fill, device=device, dtype=dtype),
                    torch.full(shape, fill, device=device, dtype=dtype))
                   for _ in range(config.num_layers)]
        self.num_lanes, self.block_size = num_lanes, block_size
        self.max_len = max_len
        self.bytes_per_token = config.kv_bytes_per_token(dtype)
        self._lane: dict[Hashable, int] = {}

    def make_pool(self, num_blocks: int, block_size: int) -> BlockPool:
        """The pool the blocks come from (v12 builds one that shares them)."""
        return BlockPool(num_blocks, block_size)

    def assign(self, request_id: Hashable, num_tokens: int) -> int:
        """A lane and the blocks for num_tokens tokens (PoolExhausted if they are not free)."""
        lane = self.free_lane(request_id)
        self.pool.allocate(request_id, num_tokens)
        self._lane[request_id] = lane
        return lane

    def free_lane(self, request_id: Hashable) -> int:
        """The lowest lane nobody holds; RequestError if the request holds one or none is free."""
        if request_id in self._lane:
            raise RequestError(f"request {request_id!r} already holds lane {self._lane[request_id]}")
        taken = set(self._lane.values())
        free = [s for s in range(self.num_lanes) if s not in taken]
        if not free:
            raise RequestError(f"all {self.num_lanes} decode lanes are taken")
        return free[0]

    def slot_of(self, request_id: Hashable) -> int | None:
        return self._lane.get(request_id)

    def __contains__(self, request_id: Hashable) -> bool:
        return request_id in self._lane

    def num_free(self) -> int:
        return self.num_lanes - len(self._lane)

    def num_tokens(self, request_id: Hashable) -> int:
        return self.pool.num_tokens(request_id) if request_id in self._lane else 0

    def total_tokens(self) -> int:
        return sum(self.pool.num_tokens(r) for r in self._lane)

    def slots_in_use(self) -> list[int]:
        """The lanes held, one per request (v05's name for them)."""
        return list(self._lane.values())

    def items(self):
        """(request id, lane, cached tokens) of every held lane."""
        return [(r, s, self.pool.num_tokens(r)) for r, s in self._lane.items()]

    def free(self, request_id: Hashable) -> None:
        if self._lane.pop(request_id, None) is not None:
            if self.poison_free_blocks:
                self.poison(self.released(request_id))
            self.pool.free(request_id)

    def released(self, request_id: Hashable) -> list[int]:
        """The blocks that free(request_id) leaves holding nothing worth keeping: all of them."""
        return self.pool.table(request_id)

    def poison(self, blocks: list[int]) -> None:
        """Fill these blocks' K and V with NaN in every layer, one block view at a time."""
        for k, v in self.kv:
            for block in blocks:
                k[block].fill_(float("nan"))
                v[block].fill_(float("nan"))

    def slots(self, request_id: Hashable, start: int, count: int) -> list[int]:
        return self.pool.slots(request_id, start, count)

    def held_bytes(self, request_id: Hashable) -> int:
        """K/V bytes the request's blocks hold: blocks * block_size tokens' worth."""
        blocks = len(self.pool.table(request_id)) if request_id in self._lane else 0
        return blocks * self.block_size * self.bytes_per_token

    def kv_of(self, request_id: Hashable) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of the request's K/V, gathered through its table: per layer (k, v) [tokens, KV, D]."""
        rows = torch.tensor(self.slots(request_id, 0, self.num_tokens(request_id)),
                            device=self.kv[0][0].device)
        return [(k.flatten(0, 1)[rows].clone(), v.flatten(0, 1)[rows].clone()) for k, v in self.kv]
