"""The sampler part: draw.py's draw, given per-lane settings that a captured decode step reads.
Each lane's settings live in static buffers of their own beside the decode inputs: written when
the lane is handed to a request, read by the graph, which draws its lanes' tokens."""
from __future__ import annotations

import dataclasses
import secrets
from typing import Sequence

import torch

from torchlet.contract import GenerationParams

from ..v10_triton_paged_gqa import DecodeBuffers
from .draw import sample


# name -> (shape of one lane's entry, dtype): what a lane asks of the sampler
SETTINGS = {"temperature": ((), torch.float32), "top_k": ((), torch.long),
            "top_p": ((), torch.float32), "min_p": ((), torch.float32), "seed": ((), torch.long)}


def settings_of(params: GenerationParams) -> dict:
    """A request's sampling settings by SETTINGS name (its seed already chosen), as plain Python
    numbers: any number type check_request took is converted here, the seed modulo 2^63."""
    return {"temperature": float(params.temperature), "top_k": int(params.top_k),
            "top_p": float(params.top_p), "min_p": float(params.min_p),
            "seed": int(params.seed) % 2 ** 63}


# What a lane holds when nothing is bound: GenerationParams' defaults, greedy.
GREEDY_ROW = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 0}


class SeededSampler:
    """Temperature, top-k, top-p and min-p, drawn by sample().

    A step whose lanes are all greedy replays a second set of graphs that takes the argmax and
    reads no settings: the sorts and hashes over the vocabulary would cost a step that samples
    nothing (on a CPU, a fifth of it)."""
    samples = True  # check_request accepts sampling settings
    constrains = False  # and refuses a grammar (a later sampler applies one)
    variants = ("sample", "greedy")  # the graphs a decode step may replay
    SERVES = ("sampling_buffers",)  # the sampling capability, served on the engine

    def __init__(self, num_lanes: int, device, *, argmax=None):
        self.settings = DecodeBuffers(num_lanes, device, SETTINGS)
        # The greedy draw: the model's ops' argmax (a kernel where they have one), torch's
        # where the sampler is built alone.
        self.argmax = argmax or (lambda logits: logits.argmax(dim=-1))

    @classmethod
    def assemble(cls, a) -> "SeededSampler":
        return cls(a.kv.num_lanes, a.device, argmax=a.model.ops.argmax)

    def prepare(self, params: GenerationParams) -> GenerationParams:
        """A request without a seed is given one when it arrives, so even its recompute after a
        preemption draws what it drew before."""
        if params.seed is None:
            return dataclasses.replace(params, seed=secrets.randbits(63))
        return params

    def bind(self, requests: Sequence) -> None:
        """Give each request's lane its settings (its prefill has just handed it the lane): on
        the host, then that lane's entries copied over; they stay while the request runs. A
        request whose settings cannot be written fails alone, its lane left greedy: what it
        asked is its own, and the other requests of the step go on."""
        host, host_np, device = self.settings.host, self.settings.host_np, self.settings.device_tensors
        for request in requests:
            try:
                for name, value in settings_of(request.params).items():
                    host_np[name][request.lane] = value
            except Exception as error:  # noqa: BLE001  (whatever its settings raise)
                request.fail(error)
                for name, value in GREEDY_ROW.items():
                    host_np[name][request.lane] = value
            # From pinned memory without waiting (a blocking copy waits for the GPU's queue):
            # the lane's host entries change only when a request binds it again, after this
            # one's tokens were read back behind this copy, and a later copy reads the newer
            # values, the ones the lane should hold.
            for name in SETTINGS:
                device[name][request.lane].copy_(host[name][request.lane], non_blocking=True)

    def draw(self, logits: torch.Tensor, requests: Sequence) -> torch.Tensor:
        """Eager draws for rows outside the graph (prefill), each at its request's next
        position, with the settings bind() wrote into its lane; the argmax alone when no row
        samples."""
        lanes = torch.tensor([r.lane for r in requests], dtype=torch.long)
        if not bool((self.settings.host["temperature"][lanes] > 0).any()):
            return self.argmax(logits)
        settings = [self.settings.host[name][lanes].to(logits.device) for name in SETTINGS]
        position = torch.tensor([len(r.sequence) for r in requests], dtype=torch.long,
                                device=logits.device)
        return sample(logits, *settings, position)

    def variant(self, lanes: Sequence[int], requests: Sequence) -> str:
        """The sampling graphs if a lane in use samples (read from the settings' host copy: no
        device read), else the greedy ones. The step's requests change nothing here."""
        temperature = self.settings.host_np["temperature"]
        return "sample" if any(temperature[lane] > 0 for lane in lanes) else "greedy"

    def lane_tensors(self, variant: str) -> tuple[torch.Tensor, ...]:
        return self.settings.tensors if variant == "sample" else ()

    def draw_lanes(self, variant: str, logits: torch.Tensor, positions: torch.Tensor,
                   *settings: torch.Tensor) -> torch.Tensor:
        """Inside the captured step: each lane's draw at `positions`, or the argmax for the
        greedy graphs."""
        if variant == "greedy":
            return self.argmax(logits)
        return sample(logits, *settings, positions)

    def sampling_buffers(self) -> dict[str, torch.Tensor]:
        """The lanes' settings, by name: what a sampling step reads besides decode_buffers()."""
        return dict(self.settings.device_tensors)
