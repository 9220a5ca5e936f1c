"""v15_chunked_prefill: one token budget a step. Running requests past their prompt decode first,
one row each; the rest of the budget goes to the next slices of prompts, oldest first. A
request remembers how much of its prompt is computed and samples its first token only after the
last slice. A long prompt arriving no longer stalls the running requests for as long as its
whole prefill takes, and a prompt longer than the budget is computed instead of refused.

Swaps the request (request.py: ChunkedRequest, which knows how far its prefill must go), the
policy (policy.py: TokenBudget) and the scheduler (scheduler.py: ChunkedScheduler: v03's
scheduler took every running request for a decode, where now a running request may be
mid-prompt, and placing
a request in the K/V memory moves from its prefill to its admission, since the budget must know
its cached prefix), and the runner (runner.py: ChunkedRunner, whose prefill computes slices and
draws only for the requests a slice finishes).

Its runner does one thing more, and why: on a GPU an eager slice step is host-bound (launching a
512-row slice of Qwen2.5-0.5B took the H200's host 16 ms against 5-7 ms of GPU work), so the
running requests' next tokens waited on launches, not on the slice's work. Where the decode
step replays graphs and the layers run their kernels, a slice pass of up to 2,048 rows replays
a graph too (slices.py: SliceGraphs, a graph per bucket of rows, requests and context bound, in
the runner), handing v13's memory its contexts packed as tensors the graph holds (PackedContext);
a bucket that a captured graph covers rides it, padded, until its third pass, since a capture
stalls its step several times as long as a padded pass."""
from torchlet.contract import CHUNKED_PREFILL

from ..v14_overlap import CAPABILITIES as PREVIOUS
from ..v14_overlap import PARTS as BEFORE
from ..v14_overlap import (KERNELS, BlockPool, FusedContextAttention, FusedOps, DecodeBuffers, GraphRunner,
                           OverlapEngine, PackedContext, PackedWeights, PagedDecoder,
                           PoolExhausted, PrefixBlockPool, PrefixKV, attend_project, context_attention,
                           default_buckets, fused_kernels, gemv, graphs, kernels, layers, metadata,
                           paged_attention, paged_kernels, draw, SeededSampler)
from .policy import TokenBudget
from .request import ChunkedRequest
from .runner import ChunkedRunner
from .scheduler import ChunkedScheduler, SlicedBatch
from .slices import SliceGraphs

CAPABILITIES = PREVIOUS + (CHUNKED_PREFILL,)
PARTS = BEFORE.replace("v15", request=ChunkedRequest, policy=TokenBudget,
                       scheduler=ChunkedScheduler, runner=ChunkedRunner)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["CAPABILITIES", "KERNELS", "OPTIONS", "PARTS", "BlockPool", "ChunkedRequest",
           "ChunkedRunner", "ChunkedScheduler", "FusedContextAttention", "FusedOps", "DecodeBuffers", "GraphRunner",
           "OverlapEngine", "PackedContext", "PackedWeights", "PagedDecoder", "PoolExhausted", "PrefixBlockPool",
           "PrefixKV", "SliceGraphs", "SlicedBatch", "TokenBudget", "build", "attend_project", "context_attention",
           "default_buckets", "fused_kernels", "gemv", "graphs", "kernels", "layers", "metadata",
           "paged_attention", "paged_kernels", "draw", "SeededSampler"]
