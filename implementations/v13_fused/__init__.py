"""v13_fused: fewer, larger kernels. Each layer's q, k and v projections run as one GEMM over
their stacked weights, and gate and up as another; one kernel turns q and k by RoPE and lays out
the heads straight from the packed GEMM output; SwiGLU reads both halves of the gate/up output;
and a prefill's attention, v12's gathers and fused call (v02's) for every request, is one
kernel a layer for all the requests of the pass, reading their contexts from the paged cache
(context_attention; without Triton, v12's way). Same tokens as v12.

Parts: the kernels over the packed outputs (fused_kernels.py), the prefill's attention over the
paged cache (context_attention.py), the decoder and its packed weights
(model.py: FusedDecoder, PackedWeights, exported as layers), and the build (engine.py: v12's
prefix_build over this decoder). From v12: the engine, runner, prefix cache, sampler, and
through it every earlier part."""
from torchlet.contract import FUSED

from ..v12_prefix_cache import CAPABILITIES as PREVIOUS
from ..v12_prefix_cache import (KERNELS, BlockPool, PoolExhausted, PrefixBlockPool, PrefixCache,
                                PrefixRunner, graphs, kernels, metadata, paged_attention,
                                paged_kernels, prefix_build, sampler)
from . import context_attention, fused_kernels
from .engine import OPTIONS, PrefixEngine, build
from .model import FusedDecoder, PackedWeights, layers

CAPABILITIES = PREVIOUS + (FUSED,)

__all__ = ["CAPABILITIES", "KERNELS", "OPTIONS", "BlockPool", "FusedDecoder", "PackedWeights",
           "PoolExhausted", "PrefixBlockPool", "PrefixCache", "PrefixEngine", "PrefixRunner",
           "build", "context_attention", "fused_kernels", "graphs", "kernels", "layers",
           "metadata", "paged_attention", "paged_kernels", "prefix_build", "sampler"]
