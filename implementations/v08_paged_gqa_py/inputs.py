"""The decode inputs over paged K/V memory: v06's static buffers, with each lane's padded block
table, its context length and the slot its new token's K/V goes to among their fields, allocated
once and written in place, read through the K/V memory's questions (kv.py: block_table, slot)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..v07_cuda_graph import DecodeBuffers, StaticInputs
from .metadata import NULL_BLOCK


class PagedInputs(StaticInputs):
    """v06's static inputs with the paged ones, read through the K/V memory."""

    def __init__(self, num_lanes: int, max_len: int, vocab: int, device, poison: bool, kv):
        self.kv = kv  # before v06's constructor, which makes the buffers from its block size
        super().__init__(num_lanes, max_len, vocab, device, poison)
        # Each lane's padded table as last written, and the table it was written from. A table
        # changes only when its request takes a block or the lane changes hands, so a step
        # converts only those rows from lists; the rest are copied over as one array.
        self.table_rows = np.full(self.buffers.host_np["block_tables"].shape, NULL_BLOCK,
                                  dtype=np.int32)
        self.row_tables: list[list[int] | None] = [None] * num_lanes
        # Where the tables sit among the buffers: write() cuts them to the step's longest.
        self.tables_at = list(self.buffers.device_tensors).index("block_tables")

    @classmethod
    def assemble(cls, a) -> "PagedInputs":
        return cls(a.kv.num_lanes, a.kv.max_len, a.config.vocab_size, a.device,
                   a.options["poison_inactive_lanes"], a.kv)

    def make_buffers(self) -> DecodeBuffers:
        """One lane per slot: v06's token id and position, then the lane's block table (room
        for max_len tokens), its context length and the slot its new token's K/V goes to. An
        idle lane's entries are zeros: an empty context, its table and its slot in the null
        block (block 0)."""
        max_blocks = -(-self.max_len // self.kv.block_size)
        return DecodeBuffers(self.num_lanes, self.device, {
            "token_ids": ((), torch.long), "positions": ((), torch.long),
            "block_tables": ((max_blocks,), torch.int32), "context_lens": ((), torch.int32),
            "slot_mapping": ((), torch.long)})

    def write(self, requests: Sequence) -> tuple[torch.Tensor, ...]:
        """Write this step's lanes, each with its request's block table and the slot its token's
        K/V goes to, into the static buffers; returns those same buffers, the block tables cut
        to the longest table written: an eager step then gathers only the blocks its requests
        hold, not room for max_len tokens (at 2,048 tokens and 16-token blocks, 128 blocks a
        lane where a 40-token request holds 3); a graph reads the whole buffers it captured,
        past each table the null block. A lane feeds its
        request's last token at the position after the rows it has computed, in room the request
        takes now (a new block only when its last one is full; RequestError if the pool has none:
        the scheduler preempts before a step gets here)."""
        kv = self.kv
        kv.grow(requests)
        lanes, positions = [r.lane for r in requests], [r.computed for r in requests]
        tables = [kv.block_table(r.id) for r in requests]
        self.lanes = self.buffers.write(lanes, {
            "token_ids": [r.sequence[-1] for r in requests], "positions": positions,
            "context_lens": [p + 1 for p in positions],
            "slot_mapping": [kv.slot(r.id, p) for r, p in zip(requests, positions)],
            "block_tables": self.padded_tables(lanes, tables)},
            self.poison, self.vocab, self.max_len)
        width = max([len(t) for t in tables], default=1) or 1
        tensors, at = self.buffers.tensors, self.tables_at
        return tensors[:at] + (tensors[at][:, :width],) + tensors[at + 1:]

    def padded_tables(self, lanes: list[int], tables: list) -> np.ndarray:
        """The lanes' block tables, each padded with the null block to the buffer's width."""
        for lane, table in zip(lanes, tables):
            if self.row_tables[lane] != table:
                self.table_rows[lane] = NULL_BLOCK
                self.table_rows[lane, :len(table)] = table
                self.row_tables[lane] = list(table)  # the caller's list may grow
        return self.table_rows[lanes]
