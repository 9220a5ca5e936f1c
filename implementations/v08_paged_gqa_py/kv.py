"""Paged K/V memory: a block pool and, per layer, one cache tensor of num_blocks blocks. A request
holds the blocks its tokens need (ceil(tokens / block_size)), no more; its decode lane (a slot
as in v05, for the fixed-shape decode step) holds no memory at all."""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np
import torch

from torchlet.contract import BLOCK_SIZE, NUM_BLOCKS, BuildOption, ModelConfig, RequestError

from ..v07_cuda_graph import LaneKV
from . import metadata
from .block_pool import BlockPool


class PagedKV(LaneKV):
    OPTIONS = LaneKV.OPTIONS + (
        BuildOption("num_blocks", int, None, "K/V blocks in the pool, the null block included "
                    "(None: as much K/V memory as v07 reserves)", NUM_BLOCKS, minimum=2),
        BuildOption("block_size", int, 16, "tokens per block", BLOCK_SIZE, minimum=1),
        BuildOption("poison_free_blocks", bool, False, "fill every block nobody owns with NaN, "
                    "at build and whenever it is freed"),
    )
    # The paged_kv capability, served on the engine (num_preemptions is the scheduler's).
    SERVES = LaneKV.SERVES + ("block_tables", "paged_metadata", "pool_stats", "kv_bytes")

    def __init__(self, config: ModelConfig, num_lanes: int, max_len: int, device, dtype,
                 num_blocks: int | None = None, block_size: int = 16,
                 poison_free_blocks: bool = False):
        """num_blocks (the null block included) defaults to as much K/V memory as v07's slots
        reserve. Poisoned, every block starts as NaN (none is owned yet): a read of a slot that
        no live request wrote shows up in its logits instead of passing for a plausible value."""
        self.block_size, self.poison_free_blocks = block_size, poison_free_blocks
        self.num_blocks = num_blocks or num_lanes * -(-max_len // block_size) + 1
        self.bytes_per_token = config.kv_bytes_per_token(dtype)
        super().__init__(config, num_lanes, max_len, device, dtype)

    @classmethod
    def assemble(cls, a) -> "PagedKV":
        o = a.options
        return cls(a.config, *cls.limits(a), a.device, a.dtype, o["num_blocks"], o["block_size"],
                   o["poison_free_blocks"])

    def memory(self, config: ModelConfig, device, dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The pool, and per layer (k, v) [num_blocks, block_size, KV, D]."""
        self.pool = self.make_pool(self.num_blocks, self.block_size)
        shape = (self.num_blocks, self.block_size, config.num_kv_heads, config.head_dim)
        fill = float("nan") if self.poison_free_blocks else 0.0
        return [(torch.full(shape, fill, device=device, dtype=dtype),
                 torch.full(shape, fill, device=device, dtype=dtype))
                for _ in range(config.num_layers)]

    def make_pool(self, num_blocks: int, block_size: int) -> BlockPool:
        """The pool the blocks come from (v12 builds one that shares them)."""
        return BlockPool(num_blocks, block_size)

    def can_place(self, sequences: Sequence[Sequence[int]]) -> bool:
        """Whether lanes and blocks are free for all of these sequences now."""
        blocks = sum(self.pool.blocks_needed(len(q)) for q in sequences)
        return len(sequences) <= self.num_free() and blocks <= self.pool.num_free

    def check_room(self, requests: Sequence) -> None:
        """RequestError unless lanes and blocks are free for all of these requests now."""
        if not self.can_place([r.sequence for r in requests]):
            raise RequestError(f"{len(requests)} requests to prefill do not fit the free lanes "
                               f"({self.num_free()}) and blocks ({self.pool.num_free})")

    def place(self, requests: Sequence) -> None:
        """Each request takes a lane and the blocks for its whole sequence; RequestError, taking
        nothing, unless all of them fit now."""
        self.check_room(requests)
        for request in requests:
            lane = self.free_lane(request.id)
            self.pool.allocate(request.id, len(request.sequence))
            self.hold(request, lane)

    def hold(self, request, lane: int) -> None:
        """The request holds this lane and the pool's blocks of its id."""
        request.lane, request.blocks = lane, self.pool.table_view(request.id)
        self.held[request.id] = request

    def destinations(self, requests: Sequence) -> torch.Tensor:
        """Where a prefill of these placed requests stores their rows: the slot of each token of
        each request's sequence, through its table, in one long tensor on the device (built
        through numpy: torch converts a list element by element)."""
        slots = [s for r in requests for s in self.slots(r.id, 0, len(r.sequence))]
        host = torch.from_numpy(np.fromiter(slots, np.int64, len(slots)))
        return host.to(self.kv[0][0].device)

    def blocks_for_decode(self, requests: Sequence) -> int:
        """New blocks a decode step of these requests takes: one per request whose last block
        is full."""
        pool = self.pool
        return sum(pool.num_tokens(r.id) % pool.block_size == 0 for r in requests)

    def grow(self, requests: Sequence) -> None:
        """Each request takes the room of the token this decode step feeds (a new block only
        when its last one is full); RequestError when the pool has none left."""
        for r in requests:
            if not self.pool.can_append(r.id):
                raise RequestError(f"no free block for request {r.id!r}'s next token")
            self.pool.append_token(r.id)

    def free(self, request_id: Hashable) -> None:
        if request_id in self.held:
            if self.poison_free_blocks:
                self.poison(self.released(request_id))
            self.pool.free(request_id)
            self.held[request_id].blocks = None
        super().free(request_id)

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

    def block_tables(self) -> dict:
        """request id -> its block table (physical block ids, in logical order), for every
        request that holds blocks."""
        return {r: self.pool.table(r) for r in self.held}

    def paged_metadata(self) -> metadata.PagedMetadata:
        """FlashInfer-style metadata (kv_indptr, kv_indices, kv_last_page_len, padded
        block_tables, context_lens) of the requests that hold blocks, in block_tables() order."""
        tables = self.block_tables()
        counts = [self.pool.num_tokens(r) for r in tables]
        return metadata.build(list(tables.values()), counts, self.pool.block_size)

    def pool_stats(self) -> dict[str, int]:
        pool = self.pool
        return {"block_size": pool.block_size, "num_blocks": pool.num_blocks,
                "num_usable": pool.num_usable, "num_free": pool.num_free, "num_used": pool.num_used}

    def kv_bytes(self, request_id: Hashable) -> int:
        """K/V bytes the request's blocks hold now: blocks * block_size tokens' worth, nothing
        reserved beyond them."""
        blocks = len(self.pool.table(request_id)) if request_id in self.held else 0
        return blocks * self.block_size * self.bytes_per_token

    def kv_of(self, request_id: Hashable) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of the request's K/V, gathered through its table: per layer (k, v)
        [tokens, KV, D]."""
        if request_id not in self.held:
            raise RequestError(f"request {request_id!r} has no cache")
        rows = torch.tensor(self.slots(request_id, 0, self.num_tokens(request_id)),
                            device=self.kv[0][0].device)
        return [(k.flatten(0, 1)[rows].clone(), v.flatten(0, 1)[rows].clone()) for k, v in self.kv]
