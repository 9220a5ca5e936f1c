"""Greedy generation by full recompute: every new token re-runs the model over the whole
sequence so far. Simple and obviously right; cost grows with the square of the length."""
from __future__ import annotations

from typing import Iterator

import torch

from torchlet.contract import Checkpoint, GenerationParams, check_prompts, check_request

from .model import Weights, forward, lm_head


class FullRecomputeEngine:
    def __init__(self, checkpoint: Checkpoint, device="cpu", dtype=torch.float32):
        self.config = checkpoint.config
        self.device = torch.device(device)
        self.weights = Weights.from_checkpoint(checkpoint, self.device, dtype)

    @classmethod
    def assemble(cls, a) -> "FullRecomputeEngine":
        return cls(a.checkpoint, a.device, a.dtype)

    def _tensor(self, token_ids: list[int]) -> torch.Tensor:
        return torch.tensor(token_ids, dtype=torch.long, device=self.device)

    @torch.inference_mode()
    def logits(self, token_ids: list[int]) -> torch.Tensor:
        check_request(token_ids, GenerationParams(max_new_tokens=1), self.config)
        ids = self._tensor(token_ids)
        positions = torch.arange(len(token_ids), device=self.device)
        return lm_head(self.weights, forward(self.weights, ids, positions)).float()

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], params: GenerationParams) -> list[list[int]]:
        prompts = [check_request(p, params, self.config) for p in check_prompts(prompts)]
        return [list(self.stream(p, params)) for p in prompts]

    @torch.inference_mode()
    def stream(self, prompt: list[int], params: GenerationParams) -> Iterator[int]:
        check_request(prompt, params, self.config)
        sequence = list(prompt)
        for _ in range(params.max_new_tokens):
            ids = self._tensor(sequence)
            hidden = forward(self.weights, ids, torch.arange(len(sequence), device=self.device))
            token = int(lm_head(self.weights, hidden[-1]).argmax())
            sequence.append(token)
            yield token
            if params.stops_at(token):
                return

