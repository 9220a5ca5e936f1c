"""v01_0_ragged_batch: the prompts of a call run as one ragged batch, their tokens laid end to
end and described by `req_indptr`; no padding. Still full recompute at every step.

Swaps the model (model.py: RaggedDecoder, attention kept within each request, over the ragged
batch's bookkeeping in ragged.py) and the loop (loop.py: RaggedEngine, one ragged pass per
step)."""
from torchlet.contract import RAGGED_BATCH

from ..v00_full_recompute import CAPABILITIES as PREVIOUS
from ..v00_full_recompute import PARTS as BEFORE
from .loop import RaggedEngine
from .model import RaggedDecoder, layers

CAPABILITIES = PREVIOUS + (RAGGED_BATCH,)
PARTS = BEFORE.replace("v01_0", model=layers, loop=RaggedEngine)
OPTIONS = PARTS.options  # none: build takes device and dtype only
build = PARTS.build

__all__ = ["CAPABILITIES", "OPTIONS", "PARTS", "RaggedDecoder", "RaggedEngine", "build", "layers"]
