"""v04_continuous_batching: requests join the running batch at any step when there is room
(max_running requests, max_step_tokens rows per step) and leave it at the step they finish;
prefill and decode share one mixed pass.

Parts: one, the admission policy (scheduler.py: ContinuousBatching), given to v03's scheduler.
From v03: the scheduler, the request state and the step loop (StepEngine) over v02's runner
(ModelRunner) and cache; the decoder (CachedDecoder; layers) is v02's."""
import torch

from torchlet.contract import CONTINUOUS_BATCHING, MAX_RUNNING, MAX_STEP_TOKENS, BuildOption

from ..v03_request_states import CAPABILITIES as PREVIOUS
from ..v03_request_states import Batch, CachedDecoder, ModelRunner, Request, StepEngine, layers
from .scheduler import ContinuousBatching, Scheduler

CAPABILITIES = PREVIOUS + (CONTINUOUS_BATCHING,)

DEFAULT_MAX_RUNNING = 16
# build's options, declared once: its refusal names them and a harness reads them (by role).
OPTIONS = (
    BuildOption("max_running", int, DEFAULT_MAX_RUNNING, "requests running at once", MAX_RUNNING,
                minimum=1),
    BuildOption("max_step_tokens", int, None, "rows one step may feed (None: the model's "
                "context, or max_running if that is more)", MAX_STEP_TOKENS, minimum=1),
)


def build(checkpoint, *, device="cpu", dtype=torch.float32, max_running: int = DEFAULT_MAX_RUNNING,
          max_step_tokens: int | None = None, **options):
    """max_step_tokens defaults to the model's context, so any acceptable prompt can be admitted."""
    if options:
        raise TypeError(f"v04 takes {' and '.join(o.name for o in OPTIONS)}, "
                        f"got {sorted(options)}")
    budget = (max(checkpoint.config.max_position, max_running) if max_step_tokens is None
              else max_step_tokens)  # 0 is refused, not taken for the default
    policy = ContinuousBatching(max_running, budget)
    return StepEngine(ModelRunner(checkpoint, device, dtype), Scheduler(policy))


__all__ = ["Batch", "CAPABILITIES", "CachedDecoder", "ContinuousBatching", "ModelRunner",
           "Request", "Scheduler", "StepEngine", "build", "layers"]
