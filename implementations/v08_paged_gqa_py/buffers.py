"""v06's static decode inputs plus the paged ones: each lane's padded block table, its context
length and the slot its new token's K/V goes to. Allocated once, written in place."""
from __future__ import annotations

import torch

from .block_pool import NULL_BLOCK


class PagedDecodeBuffers:
    def __init__(self, num_lanes: int, max_blocks: int, device):
        device = torch.device(device)
        pin = device.type == "cuda"
        shapes = {"token_ids": ((num_lanes,), torch.long), "positions": ((num_lanes,), torch.long),
                  "block_tables": ((num_lanes, max_blocks), torch.int32),
                  "context_lens": ((num_lanes,), torch.int32),
                  "slot_mapping": ((num_lanes,), torch.long)}
        self.device_tensors = {n: torch.zeros(s, dtype=d, device=device)
                               for n, (s, d) in shapes.items()}
        self.host = {n: torch.zeros(s, dtype=d, pin_memory=pin) for n, (s, d) in shapes.items()}
        # numpy views: writing through them allocates nothing (see v06's DecodeBuffers)
        self.host_np = {name: t.numpy() for name, t in self.host.items()}

    def write(self, lanes: dict, poison: torch.Generator | None = None, vocab: int = 1,
              max_len: int = 1) -> None:
        """lanes: lane -> (token id, position, block table, new token's slot). Idle lanes get an
        empty context, the null block and a null-block slot; their ids and positions are zeros,
        or garbage when poisoned."""
        h, n = self.host, self.host_np
        if poison is None:
            h["token_ids"].zero_()
            h["positions"].zero_()
        else:
            h["token_ids"].random_(0, vocab, generator=poison)
            h["positions"].random_(0, max_len, generator=poison)
        h["block_tables"].fill_(NULL_BLOCK)
        h["context_lens"].zero_()
        h["slot_mapping"].fill_(NULL_BLOCK)  # slot 0 lies in the null block
        for lane, (token, position, table, slot) in lanes.items():
            n["token_ids"][lane] = token
            n["positions"][lane] = position
            n["block_tables"][lane, :len(table)] = table
            n["context_lens"][lane] = position + 1
            n["slot_mapping"][lane] = slot
        for name, t in self.device_tensors.items():
            t.copy_(h[name], non_blocking=True)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        d = self.device_tensors
        return (d["token_ids"], d["positions"], d["block_tables"], d["context_lens"],
                d["slot_mapping"])
