"""The decode step's inputs, allocated once. Each step writes new values into the same tensors,
so every step reads the same addresses with the same shapes: what graph replay (v07) needs. On a
GPU the values are staged in pinned host memory and copied over in one transfer per buffer."""
from __future__ import annotations

import torch


class DecodeBuffers:
    FIELDS = {"token_ids": torch.long, "positions": torch.long, "active": torch.bool}

    def __init__(self, num_slots: int, device):
        device = torch.device(device)
        pin = device.type == "cuda"
        self.device_tensors = {name: torch.zeros(num_slots, dtype=dtype, device=device)
                               for name, dtype in self.FIELDS.items()}
        self.host = {name: torch.zeros(num_slots, dtype=dtype, pin_memory=pin)
                     for name, dtype in self.FIELDS.items()}
        # numpy views of the host tensors: `t[i] = value` on a tensor first makes a 0-dim tensor
        # of the value (aten.lift_fresh), an allocation per lane per step; numpy writes in place.
        self.host_np = {name: t.numpy() for name, t in self.host.items()}

    def write(self, lanes: dict[int, tuple[int, int]], poison: torch.Generator | None = None,
              vocab: int = 1, max_len: int = 1) -> None:
        """lanes: slot -> (token id, position). Other lanes get zeros, or garbage when poisoned."""
        h, n = self.host, self.host_np
        if poison is None:
            h["token_ids"].zero_()
            h["positions"].zero_()
        else:
            h["token_ids"].random_(0, vocab, generator=poison)
            h["positions"].random_(0, max_len, generator=poison)
        h["active"].zero_()
        for slot, (token, position) in lanes.items():
            n["token_ids"][slot] = token
            n["positions"][slot] = position
            n["active"][slot] = True
        for name, t in self.device_tensors.items():
            t.copy_(h[name], non_blocking=True)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        d = self.device_tensors
        return d["token_ids"], d["positions"], d["active"]
