"""v06's static decode inputs plus the paged ones: each lane's padded block table, its context
length and the slot its new token's K/V goes to. Allocated once, written in place."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..v07_cuda_graph import DecodeBuffers, StaticInputs
from .metadata import NULL_BLOCK


class PagedDecodeBuffers(DecodeBuffers):
    def __init__(self, num_lanes: int, max_blocks: int, device):
        super().__init__(num_lanes, device, {
            "token_ids": ((), torch.long), "positions": ((), torch.long),
            "block_tables": ((max_blocks,), torch.int32), "context_lens": ((), torch.int32),
            "slot_mapping": ((), torch.long)})
        # Each lane's padded table as last written, and the table it was written from. A table
        # changes only when its request takes a block or the lane changes hands, so a step
        # converts only those rows from lists; the rest are copied over as one array.
        self._rows = np.full((num_lanes, max_blocks), NULL_BLOCK, dtype=np.int32)
        self._row_tables: list[list[int] | None] = [None] * num_lanes

    def fill_lanes(self, lanes: dict) -> None:
        """lanes: lane -> (token id, position, block table, new token's slot). Idle lanes get an
        empty context, the null block and a null-block slot."""
        h, n = self.host, self.host_np
        h["block_tables"].fill_(NULL_BLOCK)
        h["context_lens"].zero_()
        h["slot_mapping"].fill_(NULL_BLOCK)  # slot 0 lies in the null block
        if not lanes:
            return
        # One numpy assignment per field, all lanes at once (as v06 writes its fields).
        rows = np.fromiter(lanes, np.intp, len(lanes))
        tokens, positions, tables, slots = zip(*lanes.values())
        n["token_ids"][rows], n["positions"][rows] = tokens, positions
        n["context_lens"][rows] = n["positions"][rows] + 1
        n["slot_mapping"][rows] = slots
        for lane, table in zip(lanes, tables):
            if self._row_tables[lane] != table:
                self._rows[lane] = NULL_BLOCK
                self._rows[lane, :len(table)] = table
                self._row_tables[lane] = list(table)  # the caller's list may grow
        n["block_tables"][rows] = self._rows[rows]


class PagedInputs(StaticInputs):
    """v06's static inputs with the paged ones, read from the K/V memory's pool."""

    def __init__(self, num_lanes: int, max_len: int, vocab: int, device, poison: bool, kv):
        self.kv = kv  # before v06's constructor, which makes the buffers from its block size
        super().__init__(num_lanes, max_len, vocab, device, poison)

    @classmethod
    def assemble(cls, a) -> "PagedInputs":
        return cls(a.kv.num_lanes, a.kv.max_len, a.config.vocab_size, a.device,
                   a.options["poison_inactive_lanes"], a.kv)

    def make_buffers(self) -> PagedDecodeBuffers:
        """One lane per slot, each with room for the block table of max_len tokens."""
        return PagedDecodeBuffers(self.num_lanes, -(-self.max_len // self.kv.block_size),
                                  self.device)

    def write(self, requests: Sequence) -> tuple[torch.Tensor, ...]:
        """Write this step's lanes, each with its request's block table and the slot its token's
        K/V goes to, into the static buffers; returns those same buffers. A lane feeds its
        request's last token at the position after the rows it has computed, in room the request
        takes now (a new block only when its last one is full; RequestError if the pool has none:
        the scheduler preempts before a step gets here)."""
        self.kv.grow(requests)
        pool, lanes = self.kv.pool, {}
        for r in requests:
            position = r.computed
            lanes[r.lane] = (r.sequence[-1], position, r.blocks, pool.slot(r.id, position))
        self.buffers.write(lanes, self.poison, self.vocab, self.max_len)
        return self.buffers.tensors
