"""v10's runner with the sampler inside the captured decode step. Each lane's settings
(temperature, top_k, top_p, min_p, seed) are decode buffers like its token and position: written
on the host when the lane is handed to a request, copied with the step's other inputs, read by
the graph. A replay returns the logits and each lane's drawn token."""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from torchlet.contract import GenerationParams

from ..v10_triton_paged_gqa import PagedDecodeBuffers, PagedRunner
from . import sampler

# name -> (shape of one lane's entry, dtype): what a lane asks of the sampler
SETTINGS = {"temperature": ((), torch.float32), "top_k": ((), torch.long),
            "top_p": ((), torch.float32), "min_p": ((), torch.float32), "seed": ((), torch.long)}


def settings_of(params: GenerationParams) -> dict:
    """A request's sampling settings by SETTINGS name (its seed already chosen)."""
    return {"temperature": params.temperature, "top_k": params.top_k, "top_p": params.top_p,
            "min_p": params.min_p, "seed": params.seed & (2 ** 63 - 1)}


class SamplingBuffers(PagedDecodeBuffers):
    def fields(self, max_blocks: int) -> dict:
        """v08's paged inputs, then the lanes' sampling settings."""
        return {**super().fields(max_blocks), **SETTINGS}

    def set_settings(self, lane: int, params: GenerationParams) -> None:
        """The lane's settings, on the host: every step's write copies them over with the rest.
        They stay while the lane's request runs; an idle lane's are never read back."""
        for name, value in settings_of(params).items():
            self.host_np[name][lane] = value


class SamplingRunner(PagedRunner):
    drawn: torch.Tensor | None = None  # the last decode step's token per lane

    def make_buffers(self) -> SamplingBuffers:
        return SamplingBuffers(self.num_slots, self.max_blocks(self.cache.max_len), self.device)

    def captured_step(self, token_ids, positions, block_tables, context_lens, slot_mapping,
                      temperature, top_k, top_p, min_p, seed):
        """v10's step to float logits, then each lane's draw for the token after its fed one
        (position + 1): the whole step, sampling included, is one graph."""
        logits = super().captured_step(token_ids, positions, block_tables, context_lens,
                                       slot_mapping)
        return logits, sampler.sample(logits, temperature, top_k, top_p, min_p, seed,
                                      positions + 1)

    def decode_step(self, *buffers) -> torch.Tensor:
        """The graph's logits, as v10's decode returns them; the draws are kept in `drawn`."""
        logits, self.drawn = super().decode_step(*buffers)
        return logits

    def set_settings(self, request_id: Hashable, params: GenerationParams) -> None:
        """Give the request's lane its sampling settings (after prefill handed it the lane)."""
        self.buffers.set_settings(self.cache.slot_of(request_id), params)

    def drawn_for(self, request_ids: Sequence[Hashable]) -> torch.Tensor:
        """The tokens the last decode step drew for these requests' lanes, on the device."""
        return self.drawn[[self.cache.slot_of(r) for r in request_ids]]

    def draw(self, logits: torch.Tensor, params: Sequence[GenerationParams],
             positions: Sequence[int]) -> torch.Tensor:
        """Eager draws for rows outside the graph (prefill): the same sampler, settings made
        into tensors here."""
        columns = zip(*(settings_of(p).values() for p in params))
        settings = [torch.tensor(c, dtype=dtype, device=logits.device)
                    for c, (_, dtype) in zip(columns, SETTINGS.values())]
        position = torch.tensor(positions, dtype=torch.long, device=logits.device)
        return sampler.sample(logits, *settings, position)
