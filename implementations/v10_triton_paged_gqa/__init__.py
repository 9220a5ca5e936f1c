"""v10_triton_paged_gqa: v09 with the paged K/V cache on Triton (paged_kernels.py): the decode
step stores new K/V with a store kernel and attends with a paged decode-attention kernel that
follows the block tables with an online softmax; the step is still replayed as a graph.

Parts: the paged kernels (paged_kernels.py) and the model functions that call them (model.py,
exported as layers, over v09's); engine.py's build is v09's build given those model functions.
From v09: the Triton layer kernels, and through v09 v08's engine, runner, block pool, cache,
scheduler and paged metadata."""
from torchlet.contract import TRITON_PAGED

from ..v09_triton_basics import CAPABILITIES as PREVIOUS
from ..v09_triton_basics import (BlockPool, PoolExhausted, graphs, kernels, kv_bytes_per_token,
                                 metadata, paged_attention)
from . import model as layers
from . import paged_kernels
from .engine import build

CAPABILITIES = PREVIOUS + (TRITON_PAGED,)

__all__ = ["CAPABILITIES", "BlockPool", "PoolExhausted", "build", "graphs", "kernels",
           "kv_bytes_per_token", "layers", "metadata", "paged_attention", "paged_kernels"]
