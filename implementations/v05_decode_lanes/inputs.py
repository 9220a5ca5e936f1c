"""A decode pass's inputs, one row per lane whatever the number of running requests, so its
shapes never change: lane s carries the request that holds it; the other lanes are dummies."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from torchlet.contract import BuildOption


class LaneInputs:
    OPTIONS = (
        BuildOption("poison_inactive_lanes", bool, False, "feed idle decode lanes random ids and "
                    "positions"),
    )

    def __init__(self, num_lanes: int, max_len: int, vocab: int, device, poison: bool):
        self.num_lanes, self.max_len, self.vocab = num_lanes, max_len, vocab
        self.device = torch.device(device)
        # Garbage for inactive lanes, to show they cannot leak into active ones (spec only).
        self.poison = torch.Generator().manual_seed(0) if poison else None
        self.lanes = torch.zeros(0, dtype=torch.long, device=self.device)  # none written yet

    @classmethod
    def assemble(cls, a) -> "LaneInputs":
        return cls(a.kv.num_lanes, a.kv.max_len, a.config.vocab_size, a.device,
                   a.options["poison_inactive_lanes"])

    def write(self, requests: Sequence) -> tuple[torch.Tensor, ...]:
        """(token_ids, positions, active), one entry per lane, made anew for this step: each
        request's last token at its position, in its lane. Keeps the requests' lanes, in their
        order, on the device (lanes): the index that picks their rows out of the pass's."""
        n = self.num_lanes
        token_ids = torch.zeros(n, dtype=torch.long)
        positions = torch.zeros(n, dtype=torch.long)
        active = torch.zeros(n, dtype=torch.bool)
        if self.poison is not None:
            token_ids = torch.randint(0, self.vocab, (n,), generator=self.poison)
            positions = torch.randint(0, self.max_len, (n,), generator=self.poison)
        for r in requests:
            token_ids[r.lane], positions[r.lane], active[r.lane] = r.sequence[-1], len(r.sequence) - 1, True
        # Through numpy: torch makes a tensor of a Python list element by element, which at
        # hundreds of lanes cost more than the indexing it serves.
        lanes = np.fromiter((r.lane for r in requests), np.int64, len(requests))
        self.lanes = torch.from_numpy(lanes).to(self.device)
        return (token_ids.to(self.device), positions.to(self.device), active.to(self.device))

