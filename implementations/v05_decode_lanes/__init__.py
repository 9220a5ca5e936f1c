"""v05_decode_lanes: a fixed number of decode lanes. A request takes a lane when it is prefilled
and keeps it until it finishes; each decode pass has every lane, active or not.

Swaps the K/V memory (kv.py: LaneKV, max_len rows per lane), the request (request.py:
LaneRequest, which carries its lane), the model (model.py: LaneDecoder, v02's decoder plus the
lane-shaped decode pass and the prefill into lanes, composing PassOps: v01_1's ops plus the layer
loop of a pass, RoPE's angles computed once in it), and
the runner (runner.py: LaneRunner, a lane-shaped decode pass then a ragged prefill), and adds
the decode inputs (inputs.py: LaneInputs, one row per lane)."""
from torchlet.contract import DECODE_LANES

from ..v04_continuous_batching import CAPABILITIES as PREVIOUS
from ..v04_continuous_batching import PARTS as BEFORE
from ..v04_continuous_batching import (Batch, CachedDecoder, ContinuousBatching, Greedy, Request,
                                      Scheduler, StepEngine)
from .inputs import LaneInputs
from .kv import LaneKV
from .model import LaneDecoder, PassOps, layers
from .request import LaneRequest
from .runner import LaneRunner
from .sampler import LaneGreedy

CAPABILITIES = PREVIOUS + (DECODE_LANES,)
PARTS = BEFORE.replace("v05", model=layers, kv=LaneKV, inputs=LaneInputs, runner=LaneRunner,
                       request=LaneRequest, sampler=LaneGreedy)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["Batch", "CAPABILITIES", "CachedDecoder", "ContinuousBatching", "Greedy", "LaneGreedy",
           "LaneInputs", "LaneKV", "LaneRequest", "LaneRunner", "OPTIONS", "PARTS", "PassOps",
           "LaneDecoder", "Request", "Scheduler", "StepEngine", "build", "layers"]
