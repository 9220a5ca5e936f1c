"""Choosing a step's tokens: greedy, the argmax of each row's logits. The sampler is a part of its
own, handed to the runner, so that a decode step captured as a graph can draw inside it and
another sampler can draw at random, each without a change to the runner."""
from __future__ import annotations

import torch

from torchlet.contract import GenerationParams


class Greedy:
    samples = False  # check_request refuses a request that asks for sampling
    constrains = False  # or a grammar

    @classmethod
    def assemble(cls, a) -> "Greedy":
        return cls()

    def prepare(self, params: GenerationParams) -> GenerationParams:
        """A request's settings as the sampler will read them: as they are."""
        return params

    def draw(self, logits: torch.Tensor, requests) -> torch.Tensor:
        """Each row's token, on the logits' device: its argmax."""
        return logits.argmax(dim=-1)
