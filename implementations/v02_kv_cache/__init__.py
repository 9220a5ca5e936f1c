"""v02_kv_cache: prefill and decode are separate passes; each request keeps the keys and values
of its tokens, so a decode step feeds only the newest token of each request.

Parts: the per-request K/V cache (cache.py), the decoder with a cached pass (model.py:
CachedDecoder, v01_1's SplitGQADecoder plus forward_cached, its causal_attention one fused call
that never holds a prompt's T x T scores; `layers` is an instance), the model
runner that owns weights and cache (runner.py: ModelRunner) and the engine over it (engine.py:
CacheEngine). From v01_1: the attention phases and the cache-free pass; through v01_1, v01_0's
RaggedEngine, whose generate, stream and forward_ragged the engine and runner reuse."""
from torchlet.contract import KV_CACHE

from ..v01_1_split_gqa import CAPABILITIES as PREVIOUS
from .engine import CacheEngine, build
from .model import CachedDecoder, layers
from .runner import ModelRunner

CAPABILITIES = PREVIOUS + (KV_CACHE,)
OPTIONS = ()  # build takes device and dtype only

__all__ = ["CAPABILITIES", "CacheEngine", "CachedDecoder", "ModelRunner", "build", "layers"]
