"""v06_static_buffers: the decode step's inputs are allocated once and updated in place, so every
step reads the same tensors. Prefill stays dynamic.

Parts: the decode buffers (buffers.py: DecodeBuffers), the runner that writes into them instead of
allocating (runner.py: StaticRunner), and the engine (engine.py: StaticEngine, v05's SlotEngine
plus decode_buffers(), built by v05's slot_build over this version's runner). From v05: the slot
cache, the decoder (SlotDecoder; layers), the engine's step, the build's option checks
(slot_limits, refuse_unknown_options) and scheduler (slot_scheduler); through v05 the rest of v04's
engine (Batch, ContinuousBatching, Request and Scheduler are passed on for later versions)."""
from torchlet.contract import STATIC_BUFFERS

from ..v05_decode_slots import CAPABILITIES as PREVIOUS
from ..v05_decode_slots import (SLOT_OPTIONS, Batch, ContinuousBatching, Request, Scheduler,
                                SlotDecoder, layers, refuse_unknown_options, slot_limits,
                                slot_scheduler)
from .buffers import DecodeBuffers
from .engine import StaticEngine, build
from .runner import StaticRunner

CAPABILITIES = PREVIOUS + (STATIC_BUFFERS,)
OPTIONS = SLOT_OPTIONS  # v05's build, v05's options

__all__ = ["Batch", "CAPABILITIES", "ContinuousBatching", "DecodeBuffers", "Request",
           "SLOT_OPTIONS", "Scheduler", "SlotDecoder", "StaticEngine", "StaticRunner", "build",
           "layers", "refuse_unknown_options", "slot_limits", "slot_scheduler"]
