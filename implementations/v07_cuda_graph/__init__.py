"""v07_cuda_graph: the decode step is captured once per bucket of lanes and replayed afterwards:
CUDA graphs on a GPU, a TorchDispatchMode stand-in (graphs.CpuGraph) on a CPU that enforces the
same contract.

Swaps the runner (runner.py: GraphedRunner, whose decode step replays a graph per bucket of
lanes, GraphRunner, each captured by graphs.py) and the sampler (sampler.py: CapturedGreedy,
whose argmax the graph holds)."""
from torchlet.contract import GRAPH_REPLAY

from ..v06_static_buffers import CAPABILITIES as PREVIOUS
from ..v06_static_buffers import PARTS as BEFORE
from ..v06_static_buffers import (Batch, CachedDecoder, ContinuousBatching, DecodeBuffers, Greedy,
                                  LaneKV, LaneRequest, PassOps, Request, Scheduler, StaticInputs,
                                  StepEngine, layers)
from . import graphs
from .runner import GraphedRunner, GraphRunner, default_buckets
from .sampler import CapturedGreedy

CAPABILITIES = PREVIOUS + (GRAPH_REPLAY,)
PARTS = BEFORE.replace("v07", runner=GraphedRunner, sampler=CapturedGreedy)
OPTIONS = PARTS.options
build = PARTS.build

__all__ = ["Batch", "CAPABILITIES", "CachedDecoder", "CapturedGreedy", "ContinuousBatching",
           "DecodeBuffers", "GraphRunner", "GraphedRunner", "Greedy", "LaneKV", "LaneRequest",
           "OPTIONS", "PARTS", "PassOps", "Request", "Scheduler", "StaticInputs", "StepEngine",
           "build", "default_buckets", "graphs", "layers"]
