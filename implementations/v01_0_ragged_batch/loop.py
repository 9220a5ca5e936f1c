"""Greedy generation over one ragged batch: every prompt of a call runs in the same forward pass,
its tokens laid end to end. Still full recompute: each step re-runs every unfinished request's
whole sequence, so the batch shares the weights' reads but not yet the history's work."""
from __future__ import annotations

from typing import Iterator

import torch

from torchlet.contract import Checkpoint, GenerationParams, check_prompts, check_request, flatten

from .model import RaggedDecoder, layers


class RaggedEngine:
    def __init__(self, checkpoint: Checkpoint, device="cpu", dtype=torch.float32,
                 model: RaggedDecoder = layers):
        self.config = checkpoint.config
        self.device = torch.device(device)
        self.model = model  # the decoder whose forward_ragged runs the batch
        self.weights = model.Weights.from_checkpoint(checkpoint, self.device, dtype)

    @classmethod
    def assemble(cls, a) -> "RaggedEngine":
        return cls(a.checkpoint, a.device, a.dtype, model=a.model)

    @torch.inference_mode()
    def forward_ragged(self, token_ids: list[int], req_indptr: torch.Tensor) -> torch.Tensor:
        """Float logits [len(token_ids), vocab] of every row of a ragged batch."""
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        hidden = self.model.forward_ragged(self.weights, ids, req_indptr.to(self.device))
        return self.model.lm_head(self.weights, hidden).float()

    @torch.inference_mode()
    def logits(self, token_ids: list[int]) -> torch.Tensor:
        check_request(token_ids, GenerationParams(max_new_tokens=1), self.config)
        return self.forward_ragged(token_ids, self.model.req_indptr([len(token_ids)]))

    def generate(self, prompts: list[list[int]], params: GenerationParams) -> list[list[int]]:
        prompts = [check_request(p, params, self.config) for p in check_prompts(prompts)]
        outputs = [[] for _ in prompts]
        for step in self._steps(prompts, params):
            for i, token in step.items():
                outputs[i].append(token)
        return outputs

    def stream(self, prompt: list[int], params: GenerationParams) -> Iterator[int]:
        check_request(prompt, params, self.config)
        for step in self._steps([prompt], params):
            yield step[0]

    @torch.inference_mode()
    def _steps(self, prompts: list[list[int]], params: GenerationParams):
        """Yield {request index: new token} once per step, over the requests still unfinished."""
        sequences = [list(p) for p in prompts]
        made = [0] * len(prompts)
        live = list(range(len(prompts)))
        while live:
            batch = [sequences[i] for i in live]
            indptr = self.model.req_indptr([len(s) for s in batch], device=self.device)
            ids = torch.tensor(flatten(batch), dtype=torch.long, device=self.device)
            hidden = self.model.forward_ragged(self.weights, ids, indptr)
            last = hidden[self.model.last_rows(indptr)]
            tokens = self.model.lm_head(self.weights, last).argmax(-1).tolist()
            for i, token in zip(live, tokens):
                sequences[i].append(token)
                made[i] += 1
            yield dict(zip(live, tokens))
            live = [i for i in live
                    if made[i] < params.max_new_tokens and not params.stops_at(sequences[i][-1])]

