"""v03_request_states: requests move WAITING -> RUNNING -> FINISHED under a scheduler that owns
their lifecycle; the engine is driven one step at a time (add_request / step / output / abort).
Admission is static batching: a new batch starts when the last one has drained.

Parts: the request and its state (request.py), the scheduler with its static-batching policy
(scheduler.py), and the step loop over a runner and a scheduler (engine.py: StepEngine). From
v02: the model runner and its per-request K/V cache (ModelRunner), and the decoder
(CachedDecoder; layers)."""
from torchlet.contract import REQUEST_STATES

from ..v02_kv_cache import CAPABILITIES as PREVIOUS
from ..v02_kv_cache import CachedDecoder, layers
from .engine import ModelRunner, StepEngine, build
from .request import Request
from .scheduler import Batch, Scheduler

CAPABILITIES = PREVIOUS + (REQUEST_STATES,)
OPTIONS = ()  # build takes device and dtype only

__all__ = ["Batch", "CAPABILITIES", "CachedDecoder", "ModelRunner", "Request", "Scheduler",
           "StepEngine", "build", "layers"]
