"""v19's sampler, which keeps each lane's settings those of the request holding the lane now.
v11 wrote a request's settings into its lane once, when its prefill handed it the lane, since
the lane was its for life; from v20 the K/V part may move it to a lower lane (kv.py). The
sampler remembers whose settings each lane holds, and before it reads the settings of a step's
requests (the decode graphs' variant, a verifying pass's rows) it writes them again for each
request that moved."""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from ..v19_structured_output import GrammarSampler


class LiveSampler(GrammarSampler):
    def __init__(self, num_lanes: int, *args, **options):
        super().__init__(num_lanes, *args, **options)
        self.holders: list[Hashable | None] = [None] * num_lanes  # whose settings a lane holds

    def bind(self, requests: Sequence) -> None:
        super().bind(requests)
        for request in requests:
            self.holders[request.lane] = request.id

    def follow(self, requests: Sequence) -> None:
        """Write again the settings of each of these requests whose lane holds another's."""
        moved = [r for r in requests if self.holders[r.lane] != r.id]
        if moved:
            self.bind(moved)

    def variant(self, lanes: Sequence[int], requests: Sequence) -> str:
        self.follow(requests)
        return super().variant(lanes, requests)

    def draws_rows_alone(self, requests: Sequence) -> bool:
        self.follow(requests)
        return super().draws_rows_alone(requests)

    def accept(self, logits: torch.Tensor, requests: Sequence,
               guesses: Sequence[Sequence[int]]) -> list[list[int]]:
        self.follow(requests)
        return super().accept(logits, requests, guesses)
