"""v03_request_states: requests move WAITING -> RUNNING -> FINISHED under a scheduler that owns
their lifecycle; the engine is driven one step at a time (add_request / step / output / abort).
Admission is static batching: a new batch starts when the last one has drained.

Parts: the request and its state (request.py), the scheduler with its static-batching policy
(scheduler.py), and the step loop over a runner and a scheduler (engine.py: StepEngine). From
v02: the model runner and its per-request K/V cache (ModelRunner), and the model functions
(layers)."""
from torchlet.contract import REQUEST_STATES

from ..v02_kv_cache import CAPABILITIES as PREVIOUS
from ..v02_kv_cache import layers
from .engine import ModelRunner, StepEngine, build
from .scheduler import Batch

CAPABILITIES = PREVIOUS + (REQUEST_STATES,)

__all__ = ["Batch", "CAPABILITIES", "ModelRunner", "StepEngine", "build", "layers"]
