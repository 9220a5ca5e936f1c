"""v08_paged_gqa_py: the K/V cache as a pool of fixed-size blocks; each request reads its K/V
through a block table, attention over the table in readable PyTorch. Decode keeps v07's graph
replay; when the pool runs out, the request admitted last is preempted and recomputed later."""
from torchlet.contract import PAGED_KV

from ..v07_cuda_graph import CAPABILITIES as PREVIOUS
from ..v07_cuda_graph import graphs
from . import metadata, paged_attention
from . import model as layers
from .block_pool import BlockPool, PoolExhausted, kv_bytes_per_token
from .engine import build

CAPABILITIES = PREVIOUS + (PAGED_KV,)

__all__ = ["CAPABILITIES", "BlockPool", "PoolExhausted", "build", "graphs", "kv_bytes_per_token",
           "layers", "metadata", "paged_attention"]
