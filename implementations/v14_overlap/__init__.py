"""v14_overlap: the host prepares the next step while the GPU computes this one. A step
launches its passes, starts copying its tokens back, launches the next step's decode for every
request that may continue, its token ids copied on the device from this step's draws, and only
then waits for its tokens. Scheduling, the lanes' inputs and postprocessing then run while the
GPU works, where v13's GPU waited for them at every step. Same tokens as v13.

Parts: the runner that decodes tokens not yet read back and reads tokens back behind an event
(runner.py: OverlapRunner, v13's PrefixRunner plus decode_ahead and start_read), and the engine
whose step launches ahead (engine.py: OverlapEngine, v13's PrefixEngine with its own step; build
adds overlap to v13's options). From v13: the fused decoder, its kernels, the prefix cache, the
sampler, and through it every earlier part."""
from torchlet.contract import OVERLAP

from ..v13_fused import CAPABILITIES as PREVIOUS
from ..v13_fused import (KERNELS, BlockPool, PoolExhausted, PrefixBlockPool, PrefixCache,
                         context_attention, fused_kernels, graphs, kernels, layers, metadata,
                         paged_attention, paged_kernels, sampler)
from .engine import OPTIONS, Ahead, OverlapEngine, build
from .runner import OverlapRunner, Unread

CAPABILITIES = PREVIOUS + (OVERLAP,)

__all__ = ["CAPABILITIES", "KERNELS", "OPTIONS", "Ahead", "BlockPool", "OverlapEngine",
           "OverlapRunner", "PoolExhausted", "PrefixBlockPool", "PrefixCache", "Unread", "build",
           "context_attention", "fused_kernels", "graphs", "kernels", "layers", "metadata",
           "paged_attention", "paged_kernels", "sampler"]
