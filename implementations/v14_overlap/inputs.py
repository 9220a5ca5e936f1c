"""The decode inputs are v08's, able to feed a token not yet read back: the loop (loop.py)
launches the step after a decode with each lane's token id copied on the device from the draws
that made it."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..v13_fused import PagedInputs


class OverlapInputs(PagedInputs):
    """v08's decode inputs, able to feed a token not yet read back."""

    # While a decode ahead is written: the token ids its requests read, on the device, in
    # their order.
    fed: torch.Tensor | None = None

    def write(self, requests: Sequence) -> tuple[torch.Tensor, ...]:
        """v08's buffers; ahead of a read-back, the lanes' token ids (each request's last known
        token, a placeholder) are then overwritten by the draws on the device."""
        buffers = super().write(requests)
        if self.fed is not None:
            buffers[0].index_copy_(0, self.lanes, self.fed)
        return buffers

    def staged(self, rows: Sequence[int]) -> torch.Tensor:
        """These ints (an index) as a tensor on the device, staged as the inputs are: from pinned
        memory the copy waits for nothing, where one from pageable memory makes the host wait
        for the GPU to finish the step."""
        host = torch.from_numpy(np.fromiter(rows, np.int64, len(rows)))
        if self.device.type != "cuda":
            return host
        # The pinned block is not reused before the copy is done (the caching host allocator
        # records the copy's stream).
        return host.pin_memory().to(self.device, non_blocking=True)
