"""v08_paged_gqa_py: the K/V cache as a pool of fixed-size blocks; each request reads its K/V
through a block table, attention over the table in readable PyTorch. Decode keeps v07's graph
replay; when the pool runs out, the request admitted last is preempted and recomputed later.

Parts: the block pool (block_pool.py) and the paged cache over it (cache.py), block-table
metadata (metadata.py), paged attention in PyTorch (paged_attention.py) and the decoder that
calls it (model.py: PagedDecoder, v05's SlotDecoder plus the paged passes; `layers` is an
instance), the paged decode buffers (buffers.py), the paged
runner (runner.py), admission and preemption over the pool (scheduler.py), and the engine
(engine.py: PagedEngine, v07's GraphEngine with a preempting step, block_tables(),
paged_metadata(), pool_stats(), kv_bytes() and num_preemptions; build adds the pool's options to
v07's). From v07: the graphs and the engine's graph_stats(); through v07, v06's
decode_buffers(), v05's two-pass step and option checks, v04's continuous-batching policy and
scheduler, v03's request state and step loop."""
from torchlet.contract import PAGED_DECODE_ATTENTION, PAGED_KV

from ..v07_cuda_graph import CAPABILITIES as PREVIOUS
from ..v07_cuda_graph import graphs
from . import metadata, paged_attention
from .block_pool import BlockPool, PoolExhausted
from .buffers import DecodeBuffers, PagedDecodeBuffers
from .cache import PagedCache
from .engine import PAGED_OPTIONS, PagedEngine, build, paged_build
from .model import PagedDecoder, layers
from .runner import PagedRunner

CAPABILITIES = PREVIOUS + (PAGED_KV,)
OPTIONS = PAGED_OPTIONS  # the options build takes (engine.py)
# The decode attention the model calls, for a harness to time alone (torchlet bench kernel).
KERNELS = {PAGED_DECODE_ATTENTION: paged_attention.paged_decode_attention}

__all__ = ["CAPABILITIES", "BlockPool", "DecodeBuffers", "PagedCache", "PagedDecodeBuffers",
           "PagedDecoder", "PagedEngine", "PagedRunner", "PoolExhausted", "paged_build", "build",
           "graphs", "layers", "metadata", "paged_attention"]
