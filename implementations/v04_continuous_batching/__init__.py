"""v04_continuous_batching: requests join the running batch at any step when there is room
(max_running requests, max_step_tokens rows per step) and leave it at the step they finish;
prefill and decode share one mixed pass.

Swaps one part, the admission policy (policy.py: ContinuousBatching)."""
from torchlet.contract import CONTINUOUS_BATCHING

from ..v03_request_states import CAPABILITIES as PREVIOUS
from ..v03_request_states import PARTS as BEFORE
from ..v03_request_states import (Batch, CachedDecoder, GQAOps, Greedy, ModelRunner, Request, Scheduler, StepEngine, StepRunner,
                                  StepStats, layers)
from .policy import ContinuousBatching

CAPABILITIES = PREVIOUS + (CONTINUOUS_BATCHING,)
PARTS = BEFORE.replace("v04", policy=ContinuousBatching)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["Batch", "CAPABILITIES", "CachedDecoder", "ContinuousBatching", "GQAOps", "Greedy", "ModelRunner", "OPTIONS", "PARTS", "Request",
           "Scheduler", "StepEngine", "StepRunner", "StepStats", "build", "layers"]
