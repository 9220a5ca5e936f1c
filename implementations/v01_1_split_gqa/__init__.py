"""v01_1_split_gqa: v01_0's behaviour, with attention split into six named phases and query heads
grouped by the KV head they read instead of copying K/V per query head.

Swaps the model (model.py: SplitGQADecoder, v01_0's decoder with its attention the phases over
grouped queries, composing GQAOps: v00's functions and the phases around the attention, the ops
every later decoder's are built on)."""
from torchlet.contract import SPLIT_GQA

from ..v01_0_ragged_batch import CAPABILITIES as PREVIOUS
from ..v01_0_ragged_batch import PARTS as BEFORE
from ..v01_0_ragged_batch import RaggedEngine
from .model import GQAOps, SplitGQADecoder, layers

CAPABILITIES = PREVIOUS + (SPLIT_GQA,)
PARTS = BEFORE.replace("v01_1", model=layers)
OPTIONS = PARTS.options  # none: build takes device and dtype only
build = PARTS.build

__all__ = ["CAPABILITIES", "GQAOps", "OPTIONS", "PARTS", "RaggedEngine", "SplitGQADecoder", "build",
           "layers"]
