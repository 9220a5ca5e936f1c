"""v10's runner with the sampler inside the captured decode step. Each lane's settings
(temperature, top_k, top_p, min_p, seed) live in static buffers of their own beside the decode
buffers: written when the lane is handed to a request, read by the graph. A replay returns the
logits and each lane's drawn token.

A step whose lanes are all greedy replays a second set of graphs that takes the argmax and
reads no settings: the sampler's sorts and hashes over the vocabulary would cost a step that
samples nothing (on a CPU, a fifth of it)."""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from torchlet.contract import GenerationParams

from ..v10_triton_paged_gqa import DecodeBuffers, PagedRunner
from . import sampler

# name -> (shape of one lane's entry, dtype): what a lane asks of the sampler
SETTINGS = {"temperature": ((), torch.float32), "top_k": ((), torch.long),
            "top_p": ((), torch.float32), "min_p": ((), torch.float32), "seed": ((), torch.long)}


def settings_of(params: GenerationParams) -> dict:
    """A request's sampling settings by SETTINGS name (its seed already chosen)."""
    return {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p,
            "min_p": params.min_p, "seed": params.seed & (2 ** 63 - 1)}


class SamplingRunner(PagedRunner):
    drawn: torch.Tensor | None = None  # the last decode step's token per lane

    def __init__(self, *args, **kwargs):
        """PagedRunner's arguments. Its graphs are made again: the sampling step takes the
        settings too."""
        super().__init__(*args, **kwargs)
        self.settings = DecodeBuffers(self.num_slots, self.device, SETTINGS)
        self.graphs = self.make_graphs(self.captured_step,
                                       self.buffers.tensors + self.settings.tensors)
        self.greedy_graphs = self.make_graphs(self.greedy_step)

    def captured_step(self, token_ids, positions, block_tables, context_lens, slot_mapping,
                      temperature, top_k, top_p, min_p, seed):
        """v10's step to float logits, then each lane's draw for the token after its fed one
        (position + 1): the whole step, sampling included, is one graph."""
        logits = super().captured_step(token_ids, positions, block_tables, context_lens,
                                       slot_mapping)
        return logits, sampler.sample(logits, temperature, top_k, top_p, min_p, seed,
                                      positions + 1)

    def greedy_step(self, *buffers):
        """The step for lanes that are all greedy: v10's logits and their argmax."""
        logits = super().captured_step(*buffers)
        return logits, logits.argmax(dim=-1)

    def step_graphs(self):
        """The sampling graphs if a lane in use samples (read from the settings' host copy: no
        device read), else the greedy ones."""
        temperature = self.settings.host_np["temperature"]
        if any(temperature[lane] > 0 for lane in self.lanes_in_use()):
            return self.graphs
        return self.greedy_graphs

    def decode_step(self, *buffers) -> torch.Tensor:
        """The graph's logits, as v10's decode returns them; the draws are kept in `drawn`."""
        logits, self.drawn = super().decode_step(*buffers)
        return logits

    def set_settings(self, request_id: Hashable, params: GenerationParams) -> None:
        """Give the request's lane its sampling settings (after prefill handed it the lane): on
        the host, then that lane's entries copied over; they stay while the request runs."""
        lane = self.cache.slot_of(request_id)
        for name, value in settings_of(params).items():
            self.settings.host_np[name][lane] = value
            self.settings.device_tensors[name][lane].copy_(self.settings.host[name][lane])

    def drawn_for(self, request_ids: Sequence[Hashable]) -> torch.Tensor:
        """The tokens the last decode step drew for these requests' lanes, on the device."""
        return self.lane_rows(self.drawn, request_ids)

    def draw(self, logits: torch.Tensor, params: Sequence[GenerationParams],
             positions: Sequence[int]) -> torch.Tensor:
        """Eager draws for rows outside the graph (prefill): the same sampler, settings made
        into tensors here; the argmax alone when no row samples."""
        if all(p.greedy for p in params):
            return logits.argmax(dim=-1)
        columns = zip(*(settings_of(p).values() for p in params))
        settings = [torch.tensor(c, dtype=dtype, device=logits.device)
                    for c, (_, dtype) in zip(columns, SETTINGS.values())]
        position = torch.tensor(positions, dtype=torch.long, device=logits.device)
        return sampler.sample(logits, *settings, position)
