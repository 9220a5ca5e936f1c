"""v12_prefix_cache: requests that share a prompt prefix share its K/V. Each full block gets a
hash of its parent block's hash and its token ids; a prompt's leading full blocks whose hashes
(and tokens, compared) are cached are shared by reference count instead of computed, and only
the rest of the prompt is prefilled. A block whose count falls to 0 stays cached, evictable, and
is evicted least recently used, when a new block is needed.

Parts: the prefix block pool (block_pool.py: reference counts, the hash chain, the evictable
queue) and the cache over it (cache.py), the prefill of uncached rows (model.py, exported as
layers), the runner that shares, computes and seals (runner.py), and the engine
(engine.py: PrefixEngine, v11's SamplingEngine plus prefix_cache_stats(); build adds
prefix_cache and block_hash to v11's options). From v11: the sampler and its runner and engine,
and through v11 v10's kernels and v08's pool, scheduler and paged metadata."""
from torchlet.contract import PREFIX_CACHE

from ..v11_sampling import CAPABILITIES as PREVIOUS
from ..v11_sampling import (KERNELS, BlockPool, PoolExhausted, graphs, kernels, metadata,
                            paged_attention, paged_kernels, sampler)
from .block_pool import PrefixBlockPool
from .cache import PrefixCache
from .engine import OPTIONS, PrefixEngine, build, prefix_build
from .model import PrefixDecoder, layers
from .runner import PrefixRunner

CAPABILITIES = PREVIOUS + (PREFIX_CACHE,)

__all__ = ["CAPABILITIES", "KERNELS", "OPTIONS", "BlockPool", "PoolExhausted", "PrefixBlockPool",
           "PrefixCache", "PrefixDecoder", "PrefixEngine", "PrefixRunner", "build", "graphs",
           "kernels", "layers", "metadata", "paged_attention", "paged_kernels", "prefix_build",
           "sampler"]
