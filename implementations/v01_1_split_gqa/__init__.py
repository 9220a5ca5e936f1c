"""v01_1_split_gqa: v01_0's behaviour, with attention split into six named phases and query heads
grouped by the KV head they read instead of copying K/V per query head.

Parts: the decoder (model.py: SplitGQADecoder, v01_0's RaggedDecoder with attention in six
phases; `layers` is an instance). From v01_0: the engine (RaggedEngine, given this decoder), the
decoder layer, the layer loop and the ragged batch's bookkeeping."""
import torch

from torchlet.contract import SPLIT_GQA

from ..v01_0_ragged_batch import CAPABILITIES as PREVIOUS
from ..v01_0_ragged_batch import RaggedEngine
from .model import SplitGQADecoder, layers

CAPABILITIES = PREVIOUS + (SPLIT_GQA,)
OPTIONS = ()  # build takes device and dtype only


def build(checkpoint, *, device="cpu", dtype=torch.float32, **options):
    if options:
        raise TypeError(f"v01_1 takes no options, got {sorted(options)}")
    return RaggedEngine(checkpoint, device, dtype, model=layers)


__all__ = ["CAPABILITIES", "RaggedEngine", "SplitGQADecoder", "build", "layers"]
