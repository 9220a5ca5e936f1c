"""A pool of fixed-size KV blocks and the block table of each request.

The KV cache of every layer is one tensor of `num_blocks` blocks of `block_size` token slots. A
request owns an ordered list of physical blocks, its block table: logical block i of the request
(its tokens i*block_size .. (i+1)*block_size - 1) lives in physical block table[i]. A request holds
only the blocks its tokens fill, so memory follows the tokens actually generated instead of a
reservation for the longest possible sequence.

Physical block 0 is never handed out: padded entries of a block table point at it, so a kernel
may read it freely and padded writes have somewhere harmless to go.
"""
from __future__ import annotations

from collections import deque
from typing import Sequence

import torch

from torchlet.contract import ModelConfig, RequestError, TorchletError

NULL_BLOCK = 0


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
        (PoolExhausted). v12 takes fewer than it needs from the free list: it shares some."""
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
        """The next free block, off the left of the free list (v12 evicts here)."""
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
