"""v06_static_buffers: the decode step's inputs are allocated once and updated in place, so every
step reads the same tensors. Prefill stays dynamic."""
from torchlet.contract import STATIC_BUFFERS

from ..v05_decode_slots import CAPABILITIES as PREVIOUS
from ..v05_decode_slots import layers
from .engine import build

CAPABILITIES = PREVIOUS + (STATIC_BUFFERS,)

__all__ = ["CAPABILITIES", "build", "layers"]
