"""Paged K/V memory: a block pool and, per layer, one cache tensor of num_blocks blocks. A request
holds the blocks its tokens need (ceil(tokens / block_size)), no more; its decode lane (a slot
as in v05, for the fixed-shape decode step) holds no memory at all.

The pool (BlockPool) hands out the blocks and keeps each request's block table: logical block i
of the request (its tokens i*block_size .. (i+1)*block_size - 1) lives in physical block
table[i]. A request holds only the blocks its tokens fill, so memory follows the tokens actually
generated instead of a reservation for the longest possible sequence.

Physical block 0 is never handed out: padded entries of a block table point at it, so a kernel
may read it freely and padded writes have somewhere harmless to go.

The decode inputs (inputs.py: PagedInputs) read this memory.
"""
from __future__ import annotations

from collections import deque
from typing import Hashable, Sequence

import numpy as np
import torch

from torchlet.contract import (BLOCK_SIZE, NUM_BLOCKS, BuildOption, ModelConfig, RequestError,
                               TorchletError)

from ..v07_cuda_graph import LaneKV
from . import metadata


class PoolExhausted(TorchletError):
    """Not enough free blocks right now; the request can wait or another can be preempted."""


class BlockPool:
    """Hands out physical blocks 1..num_blocks-1 and remembers which request owns which."""

    def __init__(self, num_blocks: int, block_size: int = 16):
        if num_blocks < 2:
            raise ValueError(f"a pool needs the null block and at least one more, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Allocation pops from the left, freeing appends on the right: both O(1).
        self._free: deque[int] = deque(range(1, num_blocks))
        self._tables: dict[int, list[int]] = {}
        self._tokens: dict[int, int] = {}

    # --- sizes ---------------------------------------------------------------------------------

    @property
    def num_usable(self) -> int:
        """Blocks that can ever be handed out: all but the null block."""
        return self.num_blocks - 1

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_usable - len(self._free)

    def blocks_needed(self, num_tokens: int) -> int:
        """ceil(num_tokens / block_size): the blocks that hold num_tokens tokens."""
        return -(-num_tokens // self.block_size)

    def can_allocate(self, num_tokens: int) -> bool:
        return self.blocks_needed(num_tokens) <= self.num_free

    def can_append(self, request_id: int) -> bool:
        """Whether one more token fits: it does if the last block has room or a block is free."""
        return self._tokens[request_id] % self.block_size != 0 or self.num_free > 0

    # --- ownership -----------------------------------------------------------------------------

    def allocate(self, request_id: int, num_tokens: int) -> list[int]:
        """Give a request the blocks for its first num_tokens tokens and return its table.

        Raises RequestError for a request that could never fit even in an empty pool, and
        PoolExhausted (leaving the pool unchanged) when it does not fit now."""
        needed = self.blocks_needed(num_tokens)
        self._check_fits(request_id, num_tokens, needed)
        self._tables[request_id] = [self._take() for _ in range(needed)]
        self._tokens[request_id] = num_tokens
        return self.table(request_id)

    def _check_fits(self, request_id: int, num_tokens: int, from_free: int) -> None:
        """Refuse, before anything changes, a request that holds blocks already, has no token or
        could never fit (RequestError), or whose from_free blocks are not free now
        (PoolExhausted). A pool that shares blocks takes fewer than it needs from the free list."""
        if request_id in self._tables:
            raise RequestError(f"request {request_id} already holds blocks; free them first")
        if num_tokens < 1:
            raise RequestError(f"a request needs at least one token, got {num_tokens}")
        needed = self.blocks_needed(num_tokens)
        if needed > self.num_usable:
            raise RequestError(
                f"request {request_id} needs {needed} blocks of {self.block_size} tokens for "
                f"{num_tokens} tokens, but the pool has only {self.num_usable} usable blocks")
        if from_free > self.num_free:
            raise PoolExhausted(
                f"request {request_id} needs {from_free} blocks, {self.num_free} are free")

    def append_token(self, request_id: int) -> int:
        """Grow a request by one token and return that token's slot. A new block is taken only
        when the last one is full; if none is free, raises PoolExhausted and changes nothing."""
        if request_id not in self._tables:
            raise RequestError(f"request {request_id} holds no blocks")
        if self._tokens[request_id] % self.block_size == 0:
            if not self._free:
                raise PoolExhausted(f"request {request_id} needs one more block, none is free")
            self._tables[request_id].append(self._take())
        self._tokens[request_id] += 1
        return self.slot(request_id, self._tokens[request_id] - 1)

    def _take(self) -> int:
        """The next free block, off the left of the free list (a pool that keeps freed blocks
        cached evicts one here)."""
        return self._free.popleft()

    def free(self, request_id: int) -> int:
        """Return all of a request's blocks to the free list, last block first, and forget the
        request. Returns how many blocks came back."""
        if request_id not in self._tables:
            raise RequestError(f"request {request_id} holds no blocks")
        table = self._tables.pop(request_id)
        del self._tokens[request_id]
        self._free.extend(reversed(table))
        return len(table)

    def holds(self, request_id: int) -> bool:
        return request_id in self._tables

    # --- reading -------------------------------------------------------------------------------

    def table(self, request_id: int) -> list[int]:
        """A copy of the request's block table: physical block of each logical block."""
        return list(self._tables[request_id])

    def table_view(self, request_id: int) -> Sequence[int]:
        """The request's block table itself, not a copy, for a reader that only looks and does
        not keep it (a decode step reads every running request's table); it grows with the
        request."""
        return self._tables[request_id]

    def num_tokens(self, request_id: int) -> int:
        return self._tokens[request_id]

    def requests(self) -> list[int]:
        """Ids of the requests that hold blocks, in allocation order."""
        return list(self._tables)

    def owners(self) -> dict[int, int]:
        """Physical block -> the request that owns it, for every block in use."""
        return {block: rid for rid, table in self._tables.items() for block in table}

    def free_blocks(self) -> list[int]:
        """The free list in the order blocks will be handed out."""
        return list(self._free)

    def slot(self, request_id: int, position: int) -> int:
        """Flat index of a token's slot in a cache viewed as [num_blocks * block_size, ...]."""
        if not 0 <= position < self._tokens[request_id]:
            raise IndexError(f"request {request_id} has {self._tokens[request_id]} tokens, "
                             f"no position {position}")
        block = self._tables[request_id][position // self.block_size]
        return block * self.block_size + position % self.block_size

    def slots(self, request_id: int, start: int, count: int) -> list[int]:
        """slot() of positions start .. start + count - 1, a block's run at a time: a prefill
        asks for thousands, and a call per token cost it milliseconds."""
        if count <= 0:
            return []
        if start < 0 or start + count > self._tokens[request_id]:
            raise IndexError(f"request {request_id} has {self._tokens[request_id]} tokens, "
                             f"no position {start if start < 0 else start + count - 1}")
        table, size, out = self._tables[request_id], self.block_size, []
        for i in range(start // size, (start + count - 1) // size + 1):
            offset = table[i] * size - i * size  # position p of logical block i: offset + p
            out.extend(range(offset + max(start, i * size),
                             offset + min(start + count, (i + 1) * size)))
        return out

    # --- memory accounting ---------------------------------------------------------------------

    def kv_bytes(self, request_id: int, config: ModelConfig, dtype: torch.dtype) -> int:
        """Bytes of K and V, over all layers, in the blocks the request holds (whole blocks:
        the unused tail of its last block counts, it cannot go to anyone else)."""
        return len(self._tables[request_id]) * self.block_size * config.kv_bytes_per_token(dtype)


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
        """The pool the blocks come from (a memory that shares blocks builds its own)."""
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
        """The request holds this lane and the pool's blocks of its id (block_table: the pool's
        table is the one record of them; the request keeps no copy to fall out of step)."""
        request.lane = lane
        self.held[request.id] = request

    def block_table(self, request_id: Hashable) -> Sequence[int]:
        """The request's block table itself, as the pool keeps it (it grows with the request):
        for a reader that looks and does not keep it."""
        return self.pool.table_view(request_id)

    def slot(self, request_id: Hashable, position: int) -> int:
        """The flat cache slot of the request's token at this position."""
        return self.pool.slot(request_id, position)

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold num_tokens tokens."""
        return self.pool.blocks_needed(num_tokens)

    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def check_alone(self, request) -> None:
        """Refuse a request that could never finish, even alone in an empty pool."""
        needed = self.pool.blocks_needed(len(request.prompt) + request.params.max_new_tokens)
        if needed > self.pool.num_usable:
            raise RequestError(
                f"prompt ({len(request.prompt)} tokens) + max_new_tokens "
                f"({request.params.max_new_tokens}) needs {needed} blocks of {self.block_size} "
                f"tokens, but the pool has only {self.pool.num_usable}: it could never finish")

    def can_preempt(self) -> bool:
        """Whether the pool is too small for every lane's longest sequence at once: running
        requests may then have to give their blocks back (the default pool never is)."""
        return self.pool.num_usable < self.num_lanes * self.pool.blocks_needed(self.max_len)

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

    def free_after_decode(self, requests: Sequence) -> int:
        """Free blocks left once a decode step of these requests has taken its new ones (below
        0: that many too few)."""
        return self.pool.num_free - self.blocks_for_decode(requests)

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
