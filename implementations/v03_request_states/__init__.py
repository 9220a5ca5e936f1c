"""v03_request_states: requests move WAITING -> RUNNING -> FINISHED under a scheduler that owns
their lifecycle; the engine is driven one step at a time (add_request / step / output / abort).
Admission is static batching: a new batch starts when the last one has drained.

Swaps in the request and its state (request.py: Request), the scheduler (scheduler.py:
Scheduler) and its static-batching policy (policy.py: StaticBatching), the greedy sampler
(sampler.py: Greedy), the runner over a step's batch (runner.py: StepRunner) and the step loop
(loop.py: StepEngine)."""
from torchlet.contract import REQUEST_STATES

from ..v02_kv_cache import CAPABILITIES as PREVIOUS
from ..v02_kv_cache import PARTS as BEFORE
from ..v02_kv_cache import CachedDecoder, GQAOps, ModelRunner, layers
from .loop import StepEngine
from .policy import StaticBatching
from .request import Request
from .runner import StepRunner
from .sampler import Greedy
from .scheduler import Batch, Scheduler, StepStats

CAPABILITIES = PREVIOUS + (REQUEST_STATES,)
PARTS = BEFORE.replace("v03", request=Request, scheduler=Scheduler, policy=StaticBatching,
                       sampler=Greedy, runner=StepRunner, loop=StepEngine)
OPTIONS = PARTS.options  # none: build takes device and dtype only
build = PARTS.build

__all__ = ["Batch", "CAPABILITIES", "CachedDecoder", "GQAOps", "Greedy", "ModelRunner", "OPTIONS", "PARTS", "Request", "Scheduler",
           "StaticBatching", "StepEngine", "StepRunner", "StepStats", "build", "layers"]
