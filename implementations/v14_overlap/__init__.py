"""v14_overlap: the host prepares the next step while the GPU computes this one. A step
launches its passes, starts copying its tokens back, launches the next step's decode for every
request that may continue, its token ids copied on the device from this step's draws, and only
then waits for its tokens. Scheduling, the lanes' inputs and postprocessing then run while the
GPU works, where v13's GPU waited for them at every step. Same tokens as v13.

Swaps the loop (loop.py: OverlapEngine, whose step launches ahead and reads back behind an
event) and the decode inputs (inputs.py: OverlapInputs, which feed a lane a token on the
device)."""
from torchlet.contract import OVERLAP

from ..v13_fused import CAPABILITIES as PREVIOUS
from ..v13_fused import PARTS as BEFORE
from ..v13_fused import (Batch, BlockPool, ContinuousBatching, FusedContextAttention, FusedOps, DecodeBuffers, GraphRunner, KERNELS, PackedContext, PackedWeights, LaneRequest, PagedAdmission, PagedDecoder, PoolExhausted, PreemptingScheduler, PrefixBlockPool, PrefixKV, PrefixRunner, attend_project, context_attention, default_buckets, fused_kernels, gemv, graphs, kernels, layers, metadata, paged_attention, paged_kernels, draw, SeededSampler)
from .inputs import OverlapInputs
from .loop import OverlapEngine

CAPABILITIES = PREVIOUS + (OVERLAP,)
PARTS = BEFORE.replace("v14", inputs=OverlapInputs, loop=OverlapEngine)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["Batch", "BlockPool", "CAPABILITIES", "ContinuousBatching", "FusedContextAttention", "FusedOps", "DecodeBuffers", "GraphRunner", "KERNELS", "OPTIONS", "OverlapEngine", "OverlapInputs", "PARTS", "PackedContext", "PackedWeights", "LaneRequest", "PagedAdmission", "PagedDecoder", "PoolExhausted", "PreemptingScheduler", "PrefixBlockPool", "PrefixKV", "PrefixRunner", "build", "attend_project", "context_attention", "default_buckets", "fused_kernels", "gemv", "graphs", "kernels", "layers", "metadata", "paged_attention", "paged_kernels", "draw", "SeededSampler"]
