"""v04_continuous_batching: requests join the running batch at any step when there is room
(max_running requests, max_step_tokens rows per step) and leave it at the step they finish;
prefill and decode share one mixed pass.

Parts: one, the admission policy (scheduler.py: ContinuousBatching), given to v03's scheduler.
From v03: the scheduler, the request state and the step loop (StepEngine) over v02's runner
(ModelRunner) and cache; the model functions (layers) are v02's."""
import torch

from torchlet.contract import CONTINUOUS_BATCHING

from ..v03_request_states import CAPABILITIES as PREVIOUS
from ..v03_request_states import Batch, ModelRunner, StepEngine, layers
from .scheduler import ContinuousBatching, Scheduler

CAPABILITIES = PREVIOUS + (CONTINUOUS_BATCHING,)

DEFAULT_MAX_RUNNING = 16


def build(checkpoint, *, device="cpu", dtype=torch.float32, max_running: int = DEFAULT_MAX_RUNNING,
          max_step_tokens: int | None = None, **options):
    """max_step_tokens defaults to the model's context, so any acceptable prompt can be admitted."""
    if options:
        raise TypeError(f"v04 takes max_running and max_step_tokens, got {sorted(options)}")
    budget = max_step_tokens or max(checkpoint.config.max_position, max_running)
    policy = ContinuousBatching(max_running, budget)
    return StepEngine(ModelRunner(checkpoint, device, dtype), Scheduler(policy))


__all__ = ["Batch", "CAPABILITIES", "ContinuousBatching", "Scheduler", "StepEngine", "build",
           "layers"]
