"""v05_decode_slots: a fixed number of decode slots. A request takes a slot when it is prefilled
and keeps it until it finishes; each decode pass has one lane per slot, active or not.

Swaps the K/V memory (kv.py: LaneKV, slots of max_len rows), the request (request.py:
LaneRequest, which carries its lane), the model (model.py: SlotDecoder, v02's decoder plus the
slot-shaped decode pass and the prefill into slots, composing PassOps: v01_1's ops plus the layer
loop of a pass, RoPE's angles computed once in it), and
the runner (runner.py: LaneRunner, a slot-shaped decode pass then a ragged prefill), and adds
the decode inputs (inputs.py: LaneInputs, one lane per slot)."""
from torchlet.contract import DECODE_SLOTS

from ..v04_continuous_batching import CAPABILITIES as PREVIOUS
from ..v04_continuous_batching import PARTS as BEFORE
from ..v04_continuous_batching import (Batch, CachedDecoder, ContinuousBatching, Greedy, Request,
                                      Scheduler, StepEngine)
from .inputs import LaneInputs
from .kv import LaneKV
from .model import PassOps, SlotDecoder, layers
from .request import LaneRequest
from .runner import LaneRunner
from .sampler import LaneGreedy

CAPABILITIES = PREVIOUS + (DECODE_SLOTS,)
PARTS = BEFORE.replace("v05", model=layers, kv=LaneKV, inputs=LaneInputs, runner=LaneRunner,
                       request=LaneRequest, sampler=LaneGreedy)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["Batch", "CAPABILITIES", "CachedDecoder", "ContinuousBatching", "Greedy", "LaneGreedy",
           "LaneInputs", "LaneKV", "LaneRequest", "LaneRunner", "OPTIONS", "PARTS", "PassOps",
           "Request", "Scheduler", "SlotDecoder", "StepEngine", "build", "layers"]
