"""v12_prefix_cache: requests that share a prompt prefix share its K/V. Each full block gets a
hash of its parent block's hash and its token ids; a prompt's leading full blocks whose hashes
(and tokens, compared) are cached are shared by reference count instead of computed, and only
the rest of the prompt is prefilled. A block whose count falls to 0 stays cached, evictable, and
is evicted least recently used, when a new block is needed.

Swaps the K/V memory (kv.py: PrefixKV over its PrefixBlockPool: reference counts, the hash
chain, the evictable queue), the runner (runner.py: PrefixRunner, which shares,
computes and seals) and the model (model.py: its memory, ContextAttention, v10's plus the prefill
of uncached rows, which attend over their whole context; v08's decoder composes it with v09's
ops)."""
from torchlet.contract import PREFIX_CACHE

from ..v11_sampling import CAPABILITIES as PREVIOUS
from ..v11_sampling import PARTS as BEFORE
from ..v11_sampling import (Batch, BlockPool, ContinuousBatching, DecodeBuffers, GraphRunner, GraphedRunner, KERNELS, LaneRequest, PagedAdmission, PagedDecoder, PagedInputs, PoolExhausted, PreemptingScheduler, StepEngine, TritonOps, default_buckets, graphs, kernels, metadata, paged_attention, paged_kernels, draw, SeededSampler)
from .kv import PrefixBlockPool, PrefixKV
from .model import ContextAttention, layers
from .runner import PrefixRunner

CAPABILITIES = PREVIOUS + (PREFIX_CACHE,)
PARTS = BEFORE.replace("v12", kv=PrefixKV, runner=PrefixRunner, model=layers)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["Batch", "BlockPool", "CAPABILITIES", "ContextAttention", "ContinuousBatching", "DecodeBuffers", "GraphRunner", "GraphedRunner", "KERNELS", "OPTIONS", "PARTS", "LaneRequest", "PagedAdmission", "PagedDecoder", "PagedInputs", "PoolExhausted", "PreemptingScheduler", "PrefixBlockPool", "PrefixKV", "PrefixRunner", "StepEngine", "TritonOps", "build", "default_buckets", "graphs", "kernels", "layers", "metadata", "paged_attention", "paged_kernels", "draw", "SeededSampler"]
