"""v20_live_lanes: a decode step sized by the requests alive now. From v05 a request kept its lane
for life, and a step ran the lanes up to the highest one in use, so a batch that shrank as its
requests finished kept running (from v07, replaying) the rows of the batch it had been. Since
v08 a request's K/V lives in blocks, and its lane holds only its row of the step's inputs and of
the sampler's settings: that row can move. Before a pass whose graph bucket would be larger
than the one that holds the requests holding lanes, the requests in the high lanes move down
into the free ones, and the pass replays the smallest bucket that holds them. Same tokens as
v19.

Swaps the K/V part (kv.py: LiveKV, whose grow() first moves the requests down where that
shrinks the bucket, their K/V left in their blocks) and the sampler (sampler.py: LiveSampler,
which writes a moved request's settings into its new lane before it reads them)."""
from torchlet.contract import LIVE_LANES

from ..v19_structured_output import CAPABILITIES as PREVIOUS
from ..v19_structured_output import PARTS as BEFORE
from ..v19_structured_output import (KERNELS, BlockPool, DraftProposer, GrammarMasks,
                                     GrammarSampler, GraphRunner, NgramProposer, PoolExhausted,
                                     PrefixBlockPool, PrefixKV, Proposer, QuantizedEmbedding,
                                     QuantizedModel, QuantizedOps, QuantizedWeights, RollbackPool,
                                     Shard, ShardedModel, SliceGraphs, SpeculationPolicy,
                                     SpeculativeBatch, SpeculativeEngine, SpeculativeKV,
                                     SpeculativeRequest, SpeculativeRunner, SpeculativeSampler,
                                     SpeculativeScheduler, TensorParallelEngine,
                                     attend_project, context_attention, cpu_kernels, default_buckets, draw,
                                     fused_kernels, gemv, gpu_kernels, graphs, kernels, layers,
                                     metadata, paged_attention, paged_kernels, qlinear, quantize,
                                     shard_checkpoint)
from .kv import LiveKV
from .sampler import LiveSampler

CAPABILITIES = PREVIOUS + (LIVE_LANES,)
PARTS = BEFORE.replace("v20", kv=LiveKV, sampler=LiveSampler)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["CAPABILITIES", "KERNELS", "OPTIONS", "PARTS", "BlockPool",
           "DraftProposer", "GrammarMasks", "GrammarSampler", "GraphRunner", "LiveKV",
           "LiveSampler", "NgramProposer", "PoolExhausted", "PrefixBlockPool", "PrefixKV",
           "Proposer", "QuantizedEmbedding", "QuantizedModel", "QuantizedOps",
           "QuantizedWeights", "RollbackPool", "Shard", "ShardedModel", "SliceGraphs",
           "SpeculationPolicy", "SpeculativeBatch", "SpeculativeEngine", "SpeculativeKV",
           "SpeculativeRequest", "SpeculativeRunner", "SpeculativeSampler",
           "SpeculativeScheduler", "TensorParallelEngine", "build", "attend_project", "context_attention",
           "cpu_kernels", "default_buckets", "draw", "fused_kernels", "gemv", "gpu_kernels",
           "graphs", "kernels", "layers", "metadata", "paged_attention",
           "paged_kernels", "qlinear", "quantize", "shard_checkpoint"]
