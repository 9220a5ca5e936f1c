"""v13_fused: fewer, larger kernels. Each layer's q, k and v projections run as one GEMM over
their stacked weights, and gate and up as another; one kernel turns q and k by RoPE and lays out
the heads straight from the packed GEMM output; SwiGLU reads both halves of the gate/up output;
and a prefill's attention, v12's gathers and fused call (v02's) for every request, is one
kernel a layer for all the requests of the pass, reading their contexts from the paged cache
(context_attention; without Triton, v12's way); at one row (a batch-1 decode step) each layer's
products are gemv kernels, down's forming SwiGLU itself, and its attention and o's product
one launch (attend_project); and the greedy draw's argmax reads the
logits once, in chunks over programs (argmax_rows), which the sampler asks of the model's ops.
Same tokens as v12.

Swaps one part, the model (model.py), both its ops and its memory: FusedOps, v09's ops with the
projections, their RoPE and SwiGLU fused and the argmax in one pass (fused_kernels.py) over
PackedWeights, one row's
products gemv kernels (gemv.py) and its attention and o one (attend_project.py), and
FusedContextAttention, v12's memory with a prefill's
attention one kernel (context_attention.py); v08's decoder composes the two."""
from torchlet.contract import FUSED

from ..v12_prefix_cache import CAPABILITIES as PREVIOUS
from ..v12_prefix_cache import PARTS as BEFORE
from ..v12_prefix_cache import (Batch, BlockPool, ContinuousBatching, DecodeBuffers, GraphRunner, GraphedRunner, KERNELS, LaneRequest, PagedAdmission, PagedInputs, PoolExhausted, PreemptingScheduler, PrefixBlockPool, PrefixKV, PrefixRunner, StepEngine, default_buckets, graphs, kernels, metadata, paged_attention, paged_kernels, draw, SeededSampler)
from . import attend_project, context_attention, fused_kernels, gemv
from .model import FusedContextAttention, FusedOps, PackedContext, PackedWeights, PagedDecoder, layers

CAPABILITIES = PREVIOUS + (FUSED,)
PARTS = BEFORE.replace("v13", model=layers)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["attend_project", "Batch", "BlockPool", "CAPABILITIES", "ContinuousBatching", "FusedContextAttention", "FusedOps", "DecodeBuffers", "GraphRunner", "GraphedRunner", "KERNELS", "OPTIONS", "PARTS", "PackedContext", "PackedWeights", "LaneRequest", "PagedAdmission", "PagedDecoder", "PagedInputs", "PoolExhausted", "PreemptingScheduler", "PrefixBlockPool", "PrefixKV", "PrefixRunner", "StepEngine", "build", "context_attention", "default_buckets", "fused_kernels", "gemv", "graphs", "kernels", "layers", "metadata", "paged_attention", "paged_kernels", "draw", "SeededSampler"]
