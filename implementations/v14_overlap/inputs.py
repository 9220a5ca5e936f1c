"""v08's decode inputs, able to feed a token not yet read back: the step after a decode is
launched with each lane's token id copied on the device from the draws that made it."""
from __future__ import annotations

from typing import Sequence

import torch

from ..v13_fused import PagedInputs


class OverlapInputs(PagedInputs):
    # While a decode ahead is written: its lanes (on the device) and the token ids they read.
    fed: tuple[torch.Tensor, torch.Tensor] | None = None

    def write(self, requests: Sequence) -> tuple[torch.Tensor, ...]:
        """v08's buffers; ahead of a read-back, the lanes' token ids (each request's last known
        token, a placeholder) are then overwritten by the draws on the device."""
        buffers = super().write(requests)
        if self.fed is not None:
            buffers[0].index_copy_(0, *self.fed)
        return buffers
