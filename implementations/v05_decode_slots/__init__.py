"""v05_decode_slots: a fixed number of decode slots. A request takes a slot when it is prefilled
and keeps it until it finishes; each decode pass has one lane per slot, active or not."""
from torchlet.contract import DECODE_SLOTS

from ..v04_continuous_batching import CAPABILITIES as PREVIOUS
from . import model as layers
from .engine import build

CAPABILITIES = PREVIOUS + (DECODE_SLOTS,)

__all__ = ["CAPABILITIES", "build", "layers"]
