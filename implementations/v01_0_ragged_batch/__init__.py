"""v01_0_ragged_batch: the prompts of a call run as one ragged batch, their tokens laid end to
end and described by `req_indptr`; no padding. Still full recompute at every step.

Parts: the ragged batch's bookkeeping (ragged.py), the decoder as a part (model.py:
RaggedDecoder, v00's blocks with attention kept within each request; `layers` is an instance),
and the engine that runs one ragged pass per step (engine.py: RaggedEngine). From v00: the
weights and every block but attention."""
from torchlet.contract import RAGGED_BATCH

from ..v00_full_recompute import CAPABILITIES as PREVIOUS
from .engine import RaggedEngine, build
from .model import RaggedDecoder, layers

CAPABILITIES = PREVIOUS + (RAGGED_BATCH,)
OPTIONS = ()  # build takes device and dtype only

__all__ = ["CAPABILITIES", "RaggedDecoder", "RaggedEngine", "build", "layers"]
