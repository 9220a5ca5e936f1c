"""v16_tensor_parallel: one model sharded over the ranks of a torch.distributed process group
(gloo on CPUs, NCCL on GPUs), Megatron-style. q/k/v and gate/up are split by output rows, so
each rank holds its heads and its share of the intermediate; o and down by input columns, then
one all-reduce each; the embedding and the LM head by vocabulary, with a masked lookup summed by
an all-reduce and the logits' slices gathered. A rank's K/V pool holds only its KV heads. With
fewer KV heads than ranks, a KV head is replicated on the ranks that share it (shard.py).

Every rank runs v15's engine on its shard; rank 0's is the one called, and each step it sends
the others that step's plan: the requests queued and aborted since the last step, and the step.
The schedule, the block tables and the draws are then the same on every rank, made by the same
parts from the same events; the logits are gathered on every rank, so each samples the same
tokens itself and none is sent (loop.py).

Swaps the model (model.py: ShardedModel, which builds its rank's shard, narrows what the parts
after it see to it, and hands v08's decoder ShardedOps: v13's ops with the collectives as
overrides) and the loop (loop.py: TensorParallelEngine, which sends the plans and follows them).
Outside a process group, or in a group of one, it is v15: TP=1 runs the same parts with no
collective."""
from torchlet.contract import TENSOR_PARALLEL

from ..v15_chunked_prefill import CAPABILITIES as PREVIOUS
from ..v15_chunked_prefill import PARTS as BEFORE
from ..v15_chunked_prefill import (KERNELS, BlockPool, FusedOps, PoolExhausted, PrefixBlockPool, PrefixKV,
                                   attend_project, context_attention, fused_kernels, gemv, graphs, kernels, layers,
                                   metadata, paged_attention, paged_kernels, draw, ChunkedRequest, ChunkedRunner, ChunkedScheduler, SeededSampler, SlicedBatch, TokenBudget, DecodeBuffers, GraphRunner, default_buckets, SliceGraphs)
from .loop import TensorParallelEngine
from .model import ShardedModel, ShardedOps, ShardedWeights, VocabShard
from .shard import Shard, shard_checkpoint

CAPABILITIES = PREVIOUS + (TENSOR_PARALLEL,)
PARTS = BEFORE.replace("v16", model=ShardedModel, loop=TensorParallelEngine)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["CAPABILITIES", "KERNELS", "OPTIONS", "PARTS", "BlockPool", "FusedOps", "PoolExhausted",
           "PrefixBlockPool", "PrefixKV", "Shard", "ShardedModel", "ShardedOps", "ShardedWeights", "TensorParallelEngine", "VocabShard", "build", "attend_project", "context_attention",
           "fused_kernels", "gemv", "graphs", "kernels", "layers", "metadata", "paged_attention",
           "paged_kernels", "draw", "shard_checkpoint", "ChunkedRequest", "ChunkedRunner", "ChunkedScheduler", "SeededSampler", "SlicedBatch", "TokenBudget", "DecodeBuffers", "GraphRunner", "default_buckets", "SliceGraphs"]
