"""v06_static_buffers: the decode step's inputs are allocated once and updated in place, so every
step reads the same tensors. Prefill stays dynamic.

Parts: the decode buffers (buffers.py), the runner that writes into them instead of allocating
(runner.py), and the engine (engine.py: StaticEngine, v05's SlotEngine plus decode_buffers(),
built by v05's slot_build over this version's runner). From v05: the slot cache, the model
functions (layers), the engine's step, the build's option checks (slot_limits,
refuse_unknown_options) and scheduler (slot_scheduler); through v05 the rest of v04's engine."""
from torchlet.contract import STATIC_BUFFERS

from ..v05_decode_slots import CAPABILITIES as PREVIOUS
from ..v05_decode_slots import (SLOT_OPTIONS, layers, refuse_unknown_options, slot_limits,
                                slot_scheduler)
from .engine import StaticEngine, build

CAPABILITIES = PREVIOUS + (STATIC_BUFFERS,)

__all__ = ["CAPABILITIES", "SLOT_OPTIONS", "StaticEngine", "build", "layers",
           "refuse_unknown_options", "slot_limits", "slot_scheduler"]
