"""Choosing a step's tokens: greedy, the argmax of each row's logits. The sampler is a part of its
own, handed to the runner, so that a later version's captured decode step can draw inside the
graph (v07) and a later sampler can draw at random (v11)."""
from __future__ import annotations

import torch

from torchlet.contract import GenerationParams


class Greedy:
    samples = False  # check_request refuses a request that asks for sampling
    # What a captured decode step asks of a sampler (v07): the graphs it may replay, by name.
    variants = ("greedy",)

    @classmethod
    def assemble(cls, a) -> "Greedy":
        return cls()

    def prepare(self, params: GenerationParams) -> GenerationParams:
        """A request's settings as the sampler will read them: as they are."""
        return params

    def draw(self, logits: torch.Tensor, requests) -> torch.Tensor:
        """Each row's token, on the logits' device: its argmax."""
        return logits.argmax(dim=-1)

    def bind(self, requests) -> None:
        """The requests have just taken decode lanes (v05 on)."""
        pass  # the argmax keeps nothing per lane

    def variant(self, lanes) -> str:
        return "greedy"

    def lane_tensors(self, variant: str) -> tuple[torch.Tensor, ...]:
        return ()

    def draw_lanes(self, variant: str, logits: torch.Tensor, positions: torch.Tensor,
                   *settings: torch.Tensor) -> torch.Tensor:
        """Inside a captured step: each lane's token, the argmax."""
        return logits.argmax(dim=-1)
