"""v13's runner, able to decode a token it has not read back: the step after a decode is
launched with each lane's token id copied on the device from the draws that made it, at the
position after the request's known tokens."""
from __future__ import annotations

from functools import cached_property
from typing import Callable, Hashable, Sequence

import torch

from ..v13_fused import PrefixRunner


class Unread(Sequence):
    """A request's tokens and one more drawn but not read back: it counts that token, and its
    last item is a placeholder the step's device copy replaces (a copy of the tokens would cost
    a pass over the whole context a request and step)."""

    def __init__(self, known: Sequence[int]):
        self.known, self.length = known, len(known) + 1

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index):
        if index in (-1, self.length - 1):
            return 0
        return self.known[index]


class OverlapRunner(PrefixRunner):
    # While a decode ahead is set up: its lanes (on the device) and the token ids they read.
    fed: tuple[torch.Tensor, torch.Tensor] | None = None

    @torch.inference_mode()
    def decode_ahead(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]],
                     fed: torch.Tensor) -> torch.Tensor:
        """Decode, for each request, the token fed[i] (on the device, drawn by the step before
        and not yet read back) at position len(sequences[i]); returns the tokens this step
        draws, on the device. Its logits are left in the graph's output (nothing reads them),
        and the blocks it fills unsealed: their hashes need the fed tokens, so the engine
        seals them (seal_filled) once it has read them."""
        lanes = self.staged(self.lane_index(request_ids))  # once: fed by them, drawn from them
        self.fed = (lanes, fed)
        try:
            self.decode_lanes(request_ids, [Unread(s) for s in sequences])
        finally:
            self.fed = None
        return self.drawn.index_select(0, lanes)

    def decode_inputs(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """v13's buffers; ahead of a read-back, the lanes' token ids are then copied from the
        draws on the device."""
        buffers = super().decode_inputs(request_ids, sequences)
        if self.fed is not None:
            buffers[0].index_copy_(0, *self.fed)
        return buffers

    @cached_property
    def read_back(self) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """A host buffer of one token per lane (pinned on a GPU) and the event that marks its
        copy: the same every step, since a step has read its tokens before the next copies."""
        pinned = self.device.type == "cuda"
        host = torch.empty(self.num_slots, dtype=torch.long, pin_memory=pinned)
        return host, torch.cuda.Event() if pinned else None

    def start_read(self, tokens: torch.Tensor) -> Callable[[], list[int]]:
        """Start copying tokens (at most one a lane) to the host; returns the wait for them, as
        ints. On a GPU the copy goes to pinned memory behind an event: work launched after it
        does not delay it, where tolist() would wait for the whole stream."""
        buffer, copied = self.read_back
        host = buffer[:tokens.shape[0]]
        host.copy_(tokens, non_blocking=True)
        if copied is not None:
            copied.record()

        def wait() -> list[int]:
            if copied is not None:
                copied.synchronize()
            return host.tolist()
        return wait
