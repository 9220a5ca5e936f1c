"""v10_triton_paged_gqa: v09 with the paged K/V cache on Triton (paged_kernels.py): the decode
step stores new K/V with a store kernel and attends with a paged decode-attention kernel that
follows the block tables with an online softmax; the step is still replayed as a graph.

Parts: the paged kernels (paged_kernels.py) and the decoder that calls them (model.py:
TritonPagedDecoder, v09's TritonDecoder with store_kv and paged_decode_attention overridden;
`layers` is an instance); engine.py's build is v09's build given that decoder.
From v09: the Triton layer kernels, and through v09 v08's engine, runner, block pool, cache,
scheduler and paged metadata."""
from torchlet.contract import PAGED_DECODE_ATTENTION, TRITON_PAGED

from ..v09_triton_basics import CAPABILITIES as PREVIOUS
from ..v09_triton_basics import (OPTIONS, BlockPool, DecodeBuffers, PagedCache, PagedDecodeBuffers, PagedEngine,
                                 PagedRunner, PoolExhausted, paged_build, graphs, kernels, metadata,
                                 paged_attention)
from . import paged_kernels
from .engine import build
from .model import TritonPagedDecoder, layers

CAPABILITIES = PREVIOUS + (TRITON_PAGED,)
# The Triton decode attention, in place of v08's PyTorch one (torchlet bench kernel times it).
KERNELS = {PAGED_DECODE_ATTENTION: paged_kernels.paged_decode_attention}

__all__ = ["CAPABILITIES", "BlockPool", "DecodeBuffers", "PagedCache", "PagedDecodeBuffers", "PagedEngine",
           "PagedRunner", "PoolExhausted", "TritonPagedDecoder", "paged_build", "build", "graphs",
           "kernels", "layers", "metadata", "paged_attention", "paged_kernels"]
