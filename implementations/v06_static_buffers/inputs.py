"""The decode step's inputs, allocated once. Each step writes new values into the same tensors,
so every step reads the same addresses with the same shapes: what graph replay (v07) needs. On a
GPU the values are staged in pinned host memory and copied over in one transfer per buffer."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from ..v05_decode_lanes import LaneInputs


class DecodeBuffers:
    # name -> (shape of one lane's entry, dtype)
    FIELDS = {"token_ids": ((), torch.long), "positions": ((), torch.long),
              "active": ((), torch.bool)}

    def __init__(self, num_slots: int, device, fields: dict | None = None):
        """One lane per slot of every field (FIELDS unless given): a device tensor, and a host
        one to write into, pinned on a GPU."""
        fields = self.FIELDS if fields is None else fields
        device = torch.device(device)
        pin = device.type == "cuda"
        shapes = {name: ((num_slots, *lane), dtype) for name, (lane, dtype) in fields.items()}
        self.device_tensors = {name: torch.zeros(shape, dtype=dtype, device=device)
                               for name, (shape, dtype) in shapes.items()}
        self.host = {name: torch.zeros(shape, dtype=dtype, pin_memory=pin)
                     for name, (shape, dtype) in shapes.items()}
        # numpy views of the host tensors: `t[i] = value` on a tensor first makes a 0-dim tensor
        # of the value (aten.lift_fresh), an allocation per lane per step; numpy writes in place.
        self.host_np = {name: t.numpy() for name, t in self.host.items()}
        # What the decode pass takes, in field order: the same tensors at every step.
        self.tensors = tuple(self.device_tensors.values())
        # Marks the end of the last copies out of the pinned host tensors (GPU only).
        self._copied = torch.cuda.Event() if pin else None

    def write(self, lanes: dict[int, tuple], poison: torch.Generator | None = None,
              vocab: int = 1, max_len: int = 1) -> None:
        """lanes: slot -> what its lane carries (see fill_lanes). Every lane's token id and
        position start as zeros, or garbage when poisoned; then one copy per buffer to the
        device, in place."""
        # The host tensors are rewritten in place, so the last write's copies must have left
        # them: nothing else makes a caller wait (the kv_cache API's decode reads nothing
        # back). A step that read its tokens back has waited already, so the query is true
        # and nothing synchronizes.
        if self._copied is not None and not self._copied.query():
            self._copied.synchronize()
        h = self.host
        if poison is None:
            h["token_ids"].zero_()
            h["positions"].zero_()
        else:
            h["token_ids"].random_(0, vocab, generator=poison)
            h["positions"].random_(0, max_len, generator=poison)
        self.fill_lanes(lanes)
        for name, t in self.device_tensors.items():
            t.copy_(h[name], non_blocking=True)
        if self._copied is not None:
            self._copied.record()

    def fill_lanes(self, lanes: dict[int, tuple[int, int]]) -> None:
        """lanes: slot -> (token id, position), written on the host; no other lane is active."""
        h, n = self.host, self.host_np
        h["active"].zero_()
        if lanes:
            # One numpy assignment per field, all lanes at once: writing lane by lane cost a
            # step a Python write per lane and field.
            slots = np.fromiter(lanes, np.intp, len(lanes))  # a list index is converted per use
            tokens, positions = zip(*lanes.values())
            n["token_ids"][slots], n["positions"][slots] = tokens, positions
            n["active"][slots] = True


class StaticInputs(LaneInputs):
    """v05's lane inputs, written into DecodeBuffers allocated once instead of made anew."""
    SERVES = ("decode_buffers",)  # the static_buffers capability, served on the engine

    def __init__(self, *args):
        super().__init__(*args)
        self.buffers = self.make_buffers()
        # What the decode pass reads, in field order: the same tensors at every step.
        self.tensors = self.buffers.tensors

    def make_buffers(self) -> DecodeBuffers:
        """One lane per slot."""
        return DecodeBuffers(self.num_lanes, self.device)

    def write(self, requests: Sequence) -> tuple[torch.Tensor, ...]:
        """Write this step's lanes into the static buffers; returns those same buffers."""
        lanes = {r.lane: (r.sequence[-1], len(r.sequence) - 1) for r in requests}
        self.buffers.write(lanes, self.poison, self.vocab, self.max_len)
        return self.buffers.tensors

    def staged(self, host: torch.Tensor) -> torch.Tensor:
        """v05's copy of a small host tensor (an index: the lanes' rows), staged as the inputs
        are: v05 copies from pageable memory, which makes the host wait for the GPU to finish
        the step; from pinned memory the copy waits for nothing."""
        if self.device.type != "cuda":
            return host
        # The pinned block is not reused before the copy is done (the caching host allocator
        # records the copy's stream).
        return host.pin_memory().to(self.device, non_blocking=True)

    def decode_buffers(self) -> dict[str, torch.Tensor]:
        """The tensors every decode step reads its inputs from: the same objects, addresses,
        shapes and dtypes at every step."""
        return dict(self.buffers.device_tensors)
