"""v05_decode_slots: a fixed number of decode slots. A request takes a slot when it is prefilled
and keeps it until it finishes; each decode pass has one lane per slot, active or not.

Parts: the slot cache (cache.py), the decoder over slots (model.py: SlotDecoder, v02's
CachedDecoder plus the slot passes; `layers` is an instance), the runner that feeds one lane per
slot (runner.py: SlotRunner), and the engine (engine.py: SlotEngine, v04's
StepEngine with a two-pass step, slot_of, num_decode_slots and the max_model_len refusal) with
its build (slot_build over this version's options, checked by slot_limits and
refuse_unknown_options). From v04: the scheduler and its continuous-batching policy (given one
running request per slot by slot_scheduler), the step loop and, from v03, the request state
(Batch, ContinuousBatching, Request and Scheduler are passed on for later versions)."""
from torchlet.contract import DECODE_SLOTS

from ..v04_continuous_batching import CAPABILITIES as PREVIOUS
from ..v04_continuous_batching import Batch, ContinuousBatching, Request, Scheduler
from .model import SlotDecoder, layers
from .runner import SlotRunner
from .engine import (SLOT_OPTIONS, SlotEngine, build, refuse_unknown_options, slot_build,
                     slot_limits, slot_scheduler)

CAPABILITIES = PREVIOUS + (DECODE_SLOTS,)
OPTIONS = SLOT_OPTIONS  # the options build takes (engine.py)

__all__ = ["Batch", "CAPABILITIES", "ContinuousBatching", "Request", "SLOT_OPTIONS", "Scheduler",
           "SlotDecoder", "SlotEngine", "SlotRunner", "build", "layers", "refuse_unknown_options",
           "slot_build", "slot_limits", "slot_scheduler"]
