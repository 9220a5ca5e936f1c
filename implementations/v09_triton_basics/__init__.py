"""v09_triton_basics: v08 with its per-token layers as Triton kernels (kernels.py): RMSNorm, the
residual add fused into the norm after it, RoPE and SwiGLU, plugged into every pass of the model
(model.py). Paging, scheduling and graph replay are v08's, unchanged.

Parts: the kernels (kernels.py) and the decoder that calls them (model.py: TritonDecoder, v08's
PagedDecoder with the per-token layers and the layer loop overridden; `layers` is an instance);
engine.py's build is v08's build given that decoder (or another, as its model option says). From
v08: the engine, runner, block pool, cache, scheduler and paged metadata, and through v08
everything earlier versions hold."""
from torchlet.contract import TRITON_BASICS

from ..v08_paged_gqa_py import CAPABILITIES as PREVIOUS
from ..v08_paged_gqa_py import (KERNELS, OPTIONS, BlockPool, DecodeBuffers, PagedCache,
                                PagedDecodeBuffers, PagedEngine, PagedRunner, PoolExhausted,
                                paged_build, graphs, metadata, paged_attention)
from . import kernels
from .engine import build
from .model import TritonDecoder, layers

CAPABILITIES = PREVIOUS + (TRITON_BASICS,)

__all__ = ["CAPABILITIES", "BlockPool", "DecodeBuffers", "PagedCache", "PagedDecodeBuffers",
           "PagedEngine", "PagedRunner", "PoolExhausted", "TritonDecoder", "paged_build", "build",
           "graphs", "kernels", "layers", "metadata", "paged_attention"]
