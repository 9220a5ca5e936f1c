"""v07_cuda_graph: the decode step is captured once per bucket of lanes and replayed afterwards:
CUDA graphs on a GPU, a TorchDispatchMode stand-in (graphs.CpuGraph) on a CPU that enforces the
same contract.

Parts: the graphs and their buckets (graphs.py), the runner whose decode step replays them
(runner.py: GraphedRunner), and the engine (engine.py: GraphEngine, v06's StaticEngine plus
graph_stats(); build adds use_graphs to v06's options). From v06: the decode buffers
(DecodeBuffers) and the engine's decode_buffers(); through v06, v05's slot cache, decoder
(SlotDecoder; layers), step and option checks, and v04's scheduler (Batch, ContinuousBatching,
Request and Scheduler are passed on for later versions)."""
from torchlet.contract import GRAPH_REPLAY

from ..v06_static_buffers import CAPABILITIES as PREVIOUS
from ..v06_static_buffers import (Batch, ContinuousBatching, DecodeBuffers, Request, Scheduler,
                                  SlotDecoder, layers, refuse_unknown_options, slot_limits)
from . import graphs
from .engine import GRAPH_OPTIONS, GraphEngine, build
from .runner import GraphedRunner

CAPABILITIES = PREVIOUS + (GRAPH_REPLAY,)
OPTIONS = GRAPH_OPTIONS  # the options build takes (engine.py)

__all__ = ["Batch", "CAPABILITIES", "ContinuousBatching", "DecodeBuffers", "GRAPH_OPTIONS",
           "GraphEngine", "GraphedRunner", "Request", "Scheduler", "SlotDecoder", "build", "graphs",
           "layers", "refuse_unknown_options", "slot_limits"]
