"""v02_kv_cache: prefill and decode are separate passes; each request keeps the keys and values
of its tokens, so a decode step feeds only the newest token of each request.

Swaps the model (model.py: CachedDecoder, v01_1's decoder over v01_1's ops with a cached pass
beside the cache-free one, its causal_attention one fused call that never holds a prompt's T x T
scores) and the loop
(loop.py: CacheEngine, prefill once then decode), and adds the K/V cache (kv.py: KVCache,
per request) and the runner that turns (request, new tokens) into logits (runner.py:
ModelRunner)."""
from torchlet.contract import KV_CACHE

from ..v01_1_split_gqa import CAPABILITIES as PREVIOUS
from ..v01_1_split_gqa import PARTS as BEFORE
from ..v01_1_split_gqa import GQAOps
from .kv import KVCache
from .loop import CacheEngine
from .model import CachedDecoder, layers
from .runner import ModelRunner

CAPABILITIES = PREVIOUS + (KV_CACHE,)
PARTS = BEFORE.replace("v02", model=layers, kv=KVCache, runner=ModelRunner, loop=CacheEngine)
OPTIONS = PARTS.options  # none: build takes device and dtype only
build = PARTS.build

__all__ = ["CAPABILITIES", "CacheEngine", "CachedDecoder", "GQAOps", "KVCache", "ModelRunner",
           "OPTIONS", "PARTS", "build", "layers"]
