"""v09_triton_basics: v08 with its per-token layers as Triton kernels (kernels.py): RMSNorm, the
residual add fused into the norm after it, RoPE and SwiGLU, plugged into every pass of the model.
Paging, scheduling and graph replay are v08's, unchanged.

Swaps one part, the model (model.py: its ops, TritonOps, v05's ops with those layers and the
layer loop on the kernels; v08's decoder composes them with v08's memory)."""
from torchlet.contract import TRITON_BASICS

from ..v08_paged_gqa_py import CAPABILITIES as PREVIOUS
from ..v08_paged_gqa_py import PARTS as BEFORE
from ..v08_paged_gqa_py import (Batch, BlockPool, ContinuousBatching, DecodeBuffers, GraphRunner, GraphedRunner, KERNELS, LaneRequest, PagedAdmission, PagedAttention, PagedDecoder, PagedInputs, PagedKV, PoolExhausted, PreemptingScheduler, StepEngine, default_buckets, graphs, metadata, paged_attention)
from . import kernels
from .model import TritonOps, layers

CAPABILITIES = PREVIOUS + (TRITON_BASICS,)
PARTS = BEFORE.replace("v09", model=layers)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["Batch", "BlockPool", "CAPABILITIES", "ContinuousBatching", "DecodeBuffers", "GraphRunner", "GraphedRunner", "KERNELS", "OPTIONS", "PARTS", "LaneRequest", "PagedAdmission", "PagedAttention", "PagedDecoder", "PagedInputs", "PagedKV", "PoolExhausted", "PreemptingScheduler", "StepEngine", "TritonOps", "build", "default_buckets", "graphs", "kernels", "layers", "metadata", "paged_attention"]
