"""v10's engine with a sampler choosing each request's token. The running requests' tokens come
out of the decode graph, drawn there; the admitted ones' come from their prefill logits, drawn
by the same sampler. A request without a seed is given one when it arrives, so even its
recompute after a preemption draws what it drew before."""
from __future__ import annotations

import dataclasses
import secrets
from functools import partial

import torch

from torchlet.contract import GenerationParams

from ..v10_triton_paged_gqa import PagedEngine, layers, paged_build
from .runner import SamplingRunner


class SamplingEngine(PagedEngine):
    samples = True  # check_request accepts sampling settings

    def sampling_buffers(self) -> dict[str, torch.Tensor]:
        """The lanes' settings, by name: what a sampling step reads besides decode_buffers()."""
        return dict(self.runner.settings.device_tensors)

    def graph_stats(self) -> dict[int, dict[str, int]]:
        """v07's counts, over both sets of graphs: the sampling ones and the greedy ones."""
        stats = super().graph_stats()
        for bucket, counts in self.runner.greedy_graphs.stats().items():
            for name, n in counts.items():
                stats[bucket][name] += n
        return stats

    def _enqueue(self, prompt: list[int], params: GenerationParams) -> int:
        if params.seed is None:
            params = dataclasses.replace(params, seed=secrets.randbits(63))
        return super()._enqueue(prompt, params)

    def _choose(self, batch, logits: torch.Tensor) -> list[int]:
        """The draws, read back to the host at once."""
        return self._draws(batch, logits).tolist()

    def _draws(self, batch, logits: torch.Tensor) -> torch.Tensor:
        """Each request's token on the device, in batch.requests order: decode rows first (their
        draws from the graph), then prefill rows (drawn here, each lane given its request's
        settings for the steps to come)."""
        drawn = [self.runner.drawn_for([r.id for r in batch.decode])] if batch.decode else []
        if batch.prefill:
            for r in batch.prefill:
                self.runner.set_settings(r.id, r.params)
            drawn.append(self.runner.draw(logits[len(batch.decode):],
                                          [r.params for r in batch.prefill],
                                          [len(r.sequence) for r in batch.prefill]))
        return torch.cat(drawn)


# v10's options, over this version's runner and engine, with v10's model functions.
build = partial(paged_build, "v11", SamplingRunner, SamplingEngine, model=layers)
