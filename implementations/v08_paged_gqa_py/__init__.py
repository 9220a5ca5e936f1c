"""v08_paged_gqa_py: the K/V cache as a pool of fixed-size blocks; each request reads its K/V
through a block table, attention over the table in readable PyTorch. Decode keeps v07's graph
replay; when the pool runs out, the request admitted last is preempted and recomputed later.

Parts: the block pool (block_pool.py) and the paged cache over it (cache.py), block-table
metadata (metadata.py), paged attention in PyTorch (paged_attention.py) and the model functions
that call it (model.py, exported as layers), the paged decode buffers (buffers.py), the paged
runner (runner.py), admission and preemption over the pool (scheduler.py), and the engine
(engine.py: PagedEngine, v07's GraphEngine with a preempting step, block_tables(),
paged_metadata(), pool_stats(), kv_bytes() and num_preemptions; build adds the pool's options to
v07's). From v07: the graphs and the engine's graph_stats(); through v07, v06's
decode_buffers(), v05's two-pass step and option checks, v04's continuous-batching policy and
scheduler, v03's request state and step loop."""
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
