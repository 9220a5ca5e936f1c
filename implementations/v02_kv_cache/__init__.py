"""v02_kv_cache: prefill and decode are separate passes; each request keeps the keys and values
of its tokens, so a decode step feeds only the newest token of each request."""
from torchlet.contract import KV_CACHE

from ..v01_1_split_gqa import CAPABILITIES as PREVIOUS
from . import model as layers
from .engine import build

CAPABILITIES = PREVIOUS + (KV_CACHE,)

__all__ = ["CAPABILITIES", "build", "layers"]
