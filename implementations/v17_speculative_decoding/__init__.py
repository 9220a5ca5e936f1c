"""v17_speculative_decoding: a cheap proposer guesses up to k tokens after each decoding
request's last one, one pass computes them all through the paged cache (graphs on: a decode
step whose lanes are the rows, replayed from a verify graph, draws included), and the request
keeps the guesses the engine would have drawn itself, plus one token of its own. At batch 1 a
step reads every weight for one row; here it reads them once for up to k + 1 tokens.

The promise is exactness: with acceptance="exact" a guess is kept exactly when it equals the
token the engine draws at its position, and since a seeded draw depends on (seed, position,
token) alone (v11), every request's tokens are those of speculative_tokens=0, greedy or
sampled, as far as the pass computes a row's logits as a one-row decode step does. In float32
(the specs', and a CPU's default) they agree; in bfloat16 they round apart (a pass of k + 1
rows a request runs other matrix kernels than a step of one row), and a greedy near-tie can go
the other way: on the copy prompt at batch 1, 52 of 64 tokens equal k=0's, on a CPU and on an
H100 alike (bench speculative, docs/benchmarks.md). batch_invariant=True (model.py), on both
sides, runs kernels whose sums do not depend on the rows, and keeps them in any dtype.
acceptance="rejection" is the textbook rule, which keeps the distribution but not the tokens.

Swaps the proposer (proposer.py, a new part: NgramProposer, prompt lookup in the request's own
sequence, or DraftProposer, a draft model's greedy tokens), the request (request.py:
SpeculativeRequest, which holds its guesses for a pass and takes several tokens a step), the
K/V memory (kv.py: SpeculativeKV, whose rows grow by the guesses and roll back to the kept
ones), the sampler (sampler.py: SpeculativeSampler, which decides what is kept), the policy
(policy.py: SpeculationPolicy, how many tokens a step guesses), the scheduler (scheduler.py:
SpeculativeScheduler, whose batch carries that number and which hands a request its tokens),
the runner (runner.py: SpeculativeRunner, the verifying pass), the loop (loop.py:
SpeculativeEngine, which runs a step that guesses in order) and the model (model.py:
InvariantModel, v16's, whose build option batch_invariant makes every row's numbers the same in
any batch, so that exact acceptance is exact in bfloat16 too). With speculative_tokens=0 (the
default) it is v16."""
from torchlet.contract import SPECULATIVE

from ..v16_tensor_parallel import CAPABILITIES as PREVIOUS
from ..v16_tensor_parallel import PARTS as BEFORE
from ..v16_tensor_parallel import (BlockPool, FusedOps, GraphRunner, KERNELS, PoolExhausted,
                                   PrefixBlockPool, PrefixKV, Shard, ShardedModel, ShardedWeights,
                                   SliceGraphs,
                                   TensorParallelEngine, attend_project, context_attention, default_buckets, draw,
                                   fused_kernels, gemv, graphs, kernels, layers, metadata,
                                   paged_attention, paged_kernels, shard_checkpoint)
from .kv import RollbackPool, SpeculativeKV
from .loop import SpeculativeEngine
from .model import FIXED_CHUNK, InvariantAttention, InvariantModel, InvariantOps
from .policy import SpeculationPolicy
from .proposer import DraftProposer, NgramProposer, Proposer
from .request import SpeculativeRequest
from .runner import SpeculativeRunner
from .sampler import SpeculativeSampler
from .scheduler import SpeculativeBatch, SpeculativeScheduler

CAPABILITIES = PREVIOUS + (SPECULATIVE,)
PARTS = BEFORE.replace("v17", model=InvariantModel, kv=SpeculativeKV, sampler=SpeculativeSampler,
                       proposer=Proposer, runner=SpeculativeRunner,
                       request=SpeculativeRequest, policy=SpeculationPolicy,
                       scheduler=SpeculativeScheduler, loop=SpeculativeEngine)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["CAPABILITIES", "FIXED_CHUNK", "KERNELS", "OPTIONS", "PARTS", "BlockPool",
           "DraftProposer", "FusedOps", "GraphRunner", "InvariantAttention", "InvariantModel",
           "InvariantOps",
           "default_buckets", "NgramProposer",
           "Proposer",
           "PoolExhausted", "PrefixBlockPool", "PrefixKV", "RollbackPool", "Shard",
           "ShardedModel", "ShardedWeights", "SliceGraphs", "SpeculationPolicy", "SpeculativeBatch", "SpeculativeEngine",
           "SpeculativeKV", "SpeculativeRequest", "SpeculativeRunner", "SpeculativeSampler",
           "SpeculativeScheduler", "TensorParallelEngine", "build", "attend_project", "context_attention", "draw",
           "fused_kernels", "gemv", "graphs", "kernels", "layers", "metadata", "paged_attention",
           "paged_kernels", "shard_checkpoint"]
