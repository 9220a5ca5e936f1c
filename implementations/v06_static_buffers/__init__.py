"""v06_static_buffers: the decode step's inputs are allocated once and updated in place, so every
step reads the same tensors. Prefill stays dynamic.

Swaps one part, the decode inputs (inputs.py: StaticInputs, written into DecodeBuffers)."""
from torchlet.contract import STATIC_BUFFERS

from ..v05_decode_lanes import CAPABILITIES as PREVIOUS
from ..v05_decode_lanes import PARTS as BEFORE
from ..v05_decode_lanes import (Batch, CachedDecoder, ContinuousBatching, Greedy, LaneGreedy, LaneKV,
                                LaneRequest, LaneRunner, PassOps, Request, Scheduler, StepEngine,
                                layers)
from .inputs import DecodeBuffers, StaticInputs

CAPABILITIES = PREVIOUS + (STATIC_BUFFERS,)
PARTS = BEFORE.replace("v06", inputs=StaticInputs)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["Batch", "CAPABILITIES", "CachedDecoder", "ContinuousBatching", "DecodeBuffers",
           "Greedy", "LaneGreedy", "LaneKV", "LaneRequest", "LaneRunner", "OPTIONS", "PARTS",
           "PassOps", "Request", "Scheduler", "StaticInputs", "StepEngine", "build", "layers"]
