"""v01_0_ragged_batch: the prompts of a call run as one ragged batch, their tokens laid end to
end and described by `req_indptr`; no padding. Still full recompute at every step."""
from torchlet.contract import RAGGED_BATCH

from ..v00_full_recompute import CAPABILITIES as PREVIOUS
from . import model as layers
from .engine import build

CAPABILITIES = PREVIOUS + (RAGGED_BATCH,)

__all__ = ["CAPABILITIES", "build", "layers"]
