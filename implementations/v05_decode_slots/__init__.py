"""v05_decode_slots: a fixed number of decode slots. A request takes a slot when it is prefilled
and keeps it until it finishes; each decode pass has one lane per slot, active or not.

Parts: the slot cache (cache.py), the model functions over slots (model.py, exported as layers),
the runner that feeds one lane per slot (runner.py), and the engine (engine.py: SlotEngine, v04's
StepEngine with a two-pass step, slot_of, num_decode_slots and the max_model_len refusal) with
its build (slot_build over this version's options, checked by slot_limits and
refuse_unknown_options). From v04: the scheduler and its continuous-batching policy (given one
running request per slot by slot_scheduler), the step loop and, from v03, the request state."""
from torchlet.contract import DECODE_SLOTS

from ..v04_continuous_batching import CAPABILITIES as PREVIOUS
from . import model as layers
from .engine import (SLOT_OPTIONS, SlotEngine, build, refuse_unknown_options, slot_build,
                     slot_limits, slot_scheduler)

CAPABILITIES = PREVIOUS + (DECODE_SLOTS,)

__all__ = ["CAPABILITIES", "SLOT_OPTIONS", "SlotEngine", "build", "layers",
           "refuse_unknown_options", "slot_build", "slot_limits", "slot_scheduler"]
