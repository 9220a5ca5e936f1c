"""v11_sampling: v10 with a sampler: temperature, top-k, top-p and min-p (Hugging Face's order),
drawn on the device by an exponential race whose random numbers are a hash of (seed, position).
A seeded request's tokens depend on nothing but itself, and the draw runs inside the captured
decode step.

Swaps one part, the sampler (sampler.py: SeededSampler, the lanes' settings over draw.py's
filters and draw, exported as `draw`), which the runner hands each captured step."""
from torchlet.contract import SAMPLING

from ..v10_triton_paged_gqa import CAPABILITIES as PREVIOUS
from ..v10_triton_paged_gqa import PARTS as BEFORE
from ..v10_triton_paged_gqa import (Batch, BlockPool, ContinuousBatching, DecodeBuffers, GraphRunner, GraphedRunner, KERNELS, LaneRequest, PagedAdmission, PagedDecoder, PagedInputs, PagedKV, PoolExhausted, PreemptingScheduler, StepEngine, TritonOps, TritonPagedAttention, default_buckets, graphs, kernels, layers, metadata, paged_attention, paged_kernels)
from . import draw
from .sampler import SeededSampler

CAPABILITIES = PREVIOUS + (SAMPLING,)
PARTS = BEFORE.replace("v11", sampler=SeededSampler)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["Batch", "BlockPool", "CAPABILITIES", "ContinuousBatching", "DecodeBuffers", "GraphRunner", "GraphedRunner", "KERNELS", "OPTIONS", "PARTS", "LaneRequest", "PagedAdmission", "PagedDecoder", "PagedInputs", "PagedKV", "PoolExhausted", "PreemptingScheduler", "SeededSampler", "StepEngine", "TritonOps", "TritonPagedAttention", "build", "default_buckets", "graphs", "kernels", "layers", "metadata", "paged_attention", "paged_kernels", "draw"]
