"""v18_quantized_weights: the model's matrices kept as small integers in groups, with a scale
(and a zero point or a minimum) a group, and products that read them as stored. At batch 1 a
decode step's time is the time to read the weights; int8 reads a quarter of float32's bytes,
int4 an eighth (plus the scales).

Formats (contract QuantizedTensor): a GGUF file's own Q8_0, Q4_0 and Q4_1 blocks, loaded as
they are (the default model's layers are Q4_1, its embedding Q8_0), and v18's own int8 per
output channel and int4 in groups with zero points, made at load from float weights
(quantize.py). Build option weights: "auto" (as the checkpoint holds them; the default),
"float" (v17), "gguf", "int8", "int4"; group_size for int4.

Swaps the model part alone (model.py: QuantizedModel, whose ops' products read the integers
through qlinear.py, and whose weights keep the checkpoint's QuantizedTensors; on a CPU in float32
its norms, RoPE, K/V store and decode attention are C++ ops beside the products, cpu_kernels.py,
run by QuantizedOps and CpuAttention). With float matrices it is v17."""
from torchlet.contract import QUANTIZED_WEIGHTS

from ..v17_speculative_decoding import CAPABILITIES as PREVIOUS
from ..v17_speculative_decoding import PARTS as BEFORE
from ..v17_speculative_decoding import (KERNELS, BlockPool, DraftProposer, GraphRunner,
                                        NgramProposer, PoolExhausted, PrefixBlockPool, PrefixKV,
                                        Proposer, RollbackPool, Shard, ShardedModel, SliceGraphs,
                                        SpeculationPolicy, SpeculativeBatch, SpeculativeEngine,
                                        SpeculativeKV, SpeculativeRequest, SpeculativeRunner,
                                        SpeculativeSampler, SpeculativeScheduler,
                                        TensorParallelEngine, attend_project, context_attention, default_buckets,
                                        draw, fused_kernels, gemv, graphs, kernels,
                                        layers, metadata, paged_attention, paged_kernels,
                                        shard_checkpoint)
from . import cpu_kernels, gpu_kernels, qlinear, quantize
from .model import QuantizedEmbedding, QuantizedModel, QuantizedOps, QuantizedWeights

CAPABILITIES = PREVIOUS + (QUANTIZED_WEIGHTS,)
PARTS = BEFORE.replace("v18", model=QuantizedModel)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["CAPABILITIES", "KERNELS", "OPTIONS", "PARTS", "BlockPool", "DraftProposer",
           "GraphRunner", "NgramProposer", "PoolExhausted", "PrefixBlockPool", "PrefixKV",
           "Proposer", "QuantizedEmbedding", "QuantizedModel", "QuantizedOps", "QuantizedWeights",
           "RollbackPool", "Shard", "ShardedModel", "SliceGraphs", "SpeculationPolicy",
           "SpeculativeBatch", "SpeculativeEngine", "SpeculativeKV", "SpeculativeRequest",
           "SpeculativeRunner", "SpeculativeSampler", "SpeculativeScheduler",
           "TensorParallelEngine", "build", "attend_project", "context_attention", "cpu_kernels", "default_buckets", "draw",
           "fused_kernels", "gemv", "gpu_kernels", "graphs", "kernels", "layers", "metadata", "paged_attention",
           "paged_kernels", "qlinear", "quantize", "shard_checkpoint"]
