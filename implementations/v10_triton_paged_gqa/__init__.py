"""v10_triton_paged_gqa: v09 with the paged K/V cache on Triton (paged_kernels.py): the decode
step stores new K/V with a store kernel and attends with a paged decode-attention kernel that
follows the block tables with an online softmax; the step is still replayed as a graph.

Swaps one part, the model (model.py: its memory, TritonPagedAttention, v08's holding the K/V
store and the decode attention kernels of paged_kernels.py; v08's decoder composes it with v09's
ops)."""
from torchlet.contract import PAGED_DECODE_ATTENTION, TRITON_PAGED

from ..v09_triton_basics import CAPABILITIES as PREVIOUS
from ..v09_triton_basics import PARTS as BEFORE
from ..v09_triton_basics import (Batch, BlockPool, ContinuousBatching, DecodeBuffers, GraphRunner, GraphedRunner, LaneRequest, PagedAdmission, PagedDecoder, PagedInputs, PagedKV, PoolExhausted, PreemptingScheduler, StepEngine, TritonOps, default_buckets, graphs, kernels, metadata, paged_attention)
from . import paged_kernels
from .model import TritonPagedAttention, layers

CAPABILITIES = PREVIOUS + (TRITON_PAGED,)
PARTS = BEFORE.replace("v10", model=layers)
OPTIONS = PARTS.options
build = PARTS.build
# The Triton decode attention, in place of v08's PyTorch one (torchlet bench kernel times it).
KERNELS = {PAGED_DECODE_ATTENTION: paged_kernels.paged_decode_attention}

__all__ = ["Batch", "BlockPool", "CAPABILITIES", "ContinuousBatching", "DecodeBuffers", "GraphRunner", "GraphedRunner", "KERNELS", "OPTIONS", "PARTS", "LaneRequest", "PagedAdmission", "PagedDecoder", "PagedInputs", "PagedKV", "PoolExhausted", "PreemptingScheduler", "StepEngine", "TritonOps", "TritonPagedAttention", "build", "default_buckets", "graphs", "kernels", "layers", "metadata", "paged_attention", "paged_kernels"]
