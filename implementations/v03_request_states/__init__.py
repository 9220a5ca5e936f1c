"""v03_request_states: requests move WAITING -> RUNNING -> FINISHED under a scheduler that owns
their lifecycle; the engine is driven one step at a time (add_request / step / output / abort).
Admission is static batching: a new batch starts when the last one has drained."""
from torchlet.contract import REQUEST_STATES

from ..v02_kv_cache import CAPABILITIES as PREVIOUS
from ..v02_kv_cache import layers
from .engine import build

CAPABILITIES = PREVIOUS + (REQUEST_STATES,)

__all__ = ["CAPABILITIES", "build", "layers"]
