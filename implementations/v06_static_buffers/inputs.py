"""The decode step's inputs, allocated once. Each step writes new values into the same tensors,
so every step reads the same addresses with the same shapes: what replaying a captured graph
needs. On a
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
        # The lanes of the last write, in its order, copied over with the fields: the index
        # that reads a pass's rows by lane back in the requests' order.
        self.lanes_host = torch.zeros(num_slots, dtype=torch.long, pin_memory=pin)
        self.lanes_np = self.lanes_host.numpy()
        self.lanes = torch.zeros(num_slots, dtype=torch.long, device=device)
        # What the decode pass takes, in field order: the same tensors at every step.
        self.tensors = tuple(self.device_tensors.values())
        # Marks the end of the last copies out of the pinned host tensors (GPU only).
        self._copied = torch.cuda.Event() if pin else None

    def write(self, lanes: Sequence[int], values: dict, poison: torch.Generator | None = None,
              vocab: int = 1, max_len: int = 1) -> torch.Tensor:
        """values[name][i] is field name's entry for lane lanes[i] (or one value for all of
        them); every other lane's entries are zeros, its token id and position garbage when
        poisoned. Then one copy per buffer to the device, in place, the lanes themselves among
        them: returns them, in their order, on the device (a view the next write overwrites)."""
        # The host tensors are rewritten in place, so the last write's copies must have left
        # them: nothing else makes a caller wait (the kv_cache API's decode reads nothing
        # back). A step that read its tokens back has waited already, so the query is true
        # and nothing synchronizes.
        if self._copied is not None and not self._copied.query():
            self._copied.synchronize()
        h = self.host
        for t in h.values():
            t.zero_()
        if poison is not None:
            h["token_ids"].random_(0, vocab, generator=poison)
            h["positions"].random_(0, max_len, generator=poison)
        # One numpy assignment per field, all lanes at once: writing lane by lane cost a step a
        # Python write per lane and field.
        rows = np.fromiter(lanes, np.intp, len(lanes))  # a list index is converted per use
        for name, column in values.items():
            self.host_np[name][rows] = column
        self.lanes_np[:len(rows)] = rows
        for name, t in self.device_tensors.items():
            t.copy_(h[name], non_blocking=True)
        self.lanes.copy_(self.lanes_host, non_blocking=True)
        if self._copied is not None:
            self._copied.record()
        return self.lanes[:len(rows)]


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
        """Write this step's lanes into the static buffers (each request's last token at its
        position, its lane active); returns those same buffers, and keeps the requests' lanes
        on the device (lanes)."""
        self.lanes = self.buffers.write([r.lane for r in requests], {
            "token_ids": [r.sequence[-1] for r in requests],
            "positions": [len(r.sequence) - 1 for r in requests], "active": True},
            self.poison, self.vocab, self.max_len)
        return self.buffers.tensors

    def decode_buffers(self) -> dict[str, torch.Tensor]:
        """The tensors every decode step reads its inputs from: the same objects, addresses,
        shapes and dtypes at every step."""
        return dict(self.buffers.device_tensors)
