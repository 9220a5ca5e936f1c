"""v06's static decode inputs plus the paged ones: each lane's padded block table, its context
length and the slot its new token's K/V goes to. Allocated once, written in place."""
from __future__ import annotations

import torch

from ..v07_cuda_graph import DecodeBuffers
from .block_pool import NULL_BLOCK


class PagedDecodeBuffers(DecodeBuffers):
    def __init__(self, num_lanes: int, max_blocks: int, device):
        super().__init__(num_lanes, device, {
            "token_ids": ((), torch.long), "positions": ((), torch.long),
            "block_tables": ((max_blocks,), torch.int32), "context_lens": ((), torch.int32),
            "slot_mapping": ((), torch.long)})

    def fill_lanes(self, lanes: dict) -> None:
        """lanes: lane -> (token id, position, block table, new token's slot). Idle lanes get an
        empty context, the null block and a null-block slot."""
        h, n = self.host, self.host_np
        h["block_tables"].fill_(NULL_BLOCK)
        h["context_lens"].zero_()
        h["slot_mapping"].fill_(NULL_BLOCK)  # slot 0 lies in the null block
        for lane, (token, position, table, slot) in lanes.items():
            n["token_ids"][lane] = token
            n["positions"][lane] = position
            n["block_tables"][lane, :len(table)] = table
            n["context_lens"][lane] = position + 1
            n["slot_mapping"][lane] = slot
