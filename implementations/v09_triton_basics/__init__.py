"""v09_triton_basics: v08 with its per-token layers as Triton kernels (kernels.py): RMSNorm, the
residual add fused into the norm after it, RoPE and SwiGLU, plugged into every pass of the model
(model.py). Paging, scheduling and graph replay are v08's, unchanged.

Parts: the kernels (kernels.py) and the model functions that call them (model.py, exported as
layers); engine.py's build is v08's build given those model functions (or others, as its model
option says). From v08: the engine, runner, block pool, cache, scheduler and paged metadata, and
through v08 everything earlier versions hold."""
from torchlet.contract import TRITON_BASICS

from ..v08_paged_gqa_py import CAPABILITIES as PREVIOUS
from ..v08_paged_gqa_py import (BlockPool, PoolExhausted, graphs, kv_bytes_per_token, metadata,
                                paged_attention)
from . import kernels
from . import model as layers
from .engine import build

CAPABILITIES = PREVIOUS + (TRITON_BASICS,)

__all__ = ["CAPABILITIES", "BlockPool", "PoolExhausted", "build", "graphs", "kernels",
           "kv_bytes_per_token", "layers", "metadata", "paged_attention"]
