"""v19_structured_output: answers that always parse. A request may carry a grammar
(GenerationParams.grammar: a JSON schema, any JSON object, a regex, a choice or an EBNF grammar,
compiled by the harness with xgrammar against the tokenizer's vocabulary); every draw it takes
is then among the tokens the grammar allows after its tokens so far, and once the grammar is
complete, among its eos and stop ids, which end it.

Adds the grammar part (grammar.py: GrammarMasks, a matcher per constrained request kept in step
with its tokens, and the bitmask of its next draws) and swaps the sampler (sampler.py:
GrammarSampler, which applies the masks before temperature and the filters in every way v18
draws: a prefill's first token, a decode step's lanes inside the graph, a verifying pass's
rows, each masked after the guesses before it, the matcher rolled back). A decode launched
ahead (v14) draws before the host has the token its masks follow: the sampler draws the
constrained rows again from its logits once the host has read it (settle), the masks filled
while the GPU computes. Without a grammar it is v18."""
from torchlet.contract import STRUCTURED_OUTPUT

from ..v18_quantized_weights import CAPABILITIES as PREVIOUS
from ..v18_quantized_weights import PARTS as BEFORE
from ..v18_quantized_weights import (KERNELS, BlockPool, DraftProposer, GraphRunner, NgramProposer,
                                     PoolExhausted, PrefixBlockPool, PrefixKV, Proposer,
                                     QuantizedEmbedding, QuantizedModel, QuantizedOps,
                                     QuantizedWeights, RollbackPool, Shard, ShardedModel,
                                     SliceGraphs, SpeculationPolicy, SpeculativeBatch,
                                     SpeculativeEngine, SpeculativeKV, SpeculativeRequest,
                                     SpeculativeRunner, SpeculativeSampler, SpeculativeScheduler,
                                     TensorParallelEngine, attend_project, context_attention, cpu_kernels,
                                     default_buckets, draw, fused_kernels, gemv, gpu_kernels,
                                     graphs, kernels, layers, metadata, paged_attention,
                                     paged_kernels, qlinear, quantize, shard_checkpoint)
from .grammar import GrammarMasks
from .sampler import GrammarSampler

CAPABILITIES = PREVIOUS + (STRUCTURED_OUTPUT,)
PARTS = BEFORE.replace("v19", grammar=GrammarMasks, sampler=GrammarSampler)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["CAPABILITIES", "KERNELS", "OPTIONS", "PARTS", "BlockPool", "DraftProposer",
           "GrammarMasks", "GrammarSampler", "GraphRunner", "NgramProposer", "PoolExhausted",
           "PrefixBlockPool", "PrefixKV", "Proposer", "QuantizedEmbedding", "QuantizedModel",
           "QuantizedOps", "QuantizedWeights", "RollbackPool", "Shard", "ShardedModel",
           "SliceGraphs", "SpeculationPolicy", "SpeculativeBatch", "SpeculativeEngine",
           "SpeculativeKV", "SpeculativeRequest", "SpeculativeRunner", "SpeculativeSampler",
           "SpeculativeScheduler", "TensorParallelEngine", "build", "attend_project", "context_attention",
           "cpu_kernels", "default_buckets", "draw", "fused_kernels", "gemv", "gpu_kernels",
           "graphs", "kernels", "layers", "metadata", "paged_attention", "paged_kernels",
           "qlinear", "quantize", "shard_checkpoint"]
