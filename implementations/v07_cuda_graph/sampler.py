"""v05's greedy sampler, drawing inside a captured decode step: the graph holds the whole step, the
draw included, so a replay hands back each lane's token with no host work."""
from __future__ import annotations

import torch

from ..v06_static_buffers import LaneGreedy


class CapturedGreedy(LaneGreedy):
    # The graphs a decode step may replay, by name: one, since every lane takes the argmax.
    variants = ("greedy",)

    def variant(self, lanes, requests) -> str:
        """The graphs this step replays, for the lanes in use (and the step's requests)."""
        return "greedy"

    def lane_tensors(self, variant: str) -> tuple[torch.Tensor, ...]:
        """Per-lane inputs the step reads besides the decode inputs: none."""
        return ()

    def draw_lanes(self, variant: str, logits: torch.Tensor, positions: torch.Tensor,
                   *settings: torch.Tensor) -> torch.Tensor:
        """Inside the captured step: each lane's token, the argmax the eager draw takes."""
        return self.draw(logits, ())
