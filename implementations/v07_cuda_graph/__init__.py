"""v07_cuda_graph: the decode step is captured once per bucket of lanes and replayed afterwards:
CUDA graphs on a GPU, a TorchDispatchMode stand-in (graphs.CpuGraph) on a CPU that enforces the
same contract."""
from torchlet.contract import GRAPH_REPLAY

from ..v06_static_buffers import CAPABILITIES as PREVIOUS
from ..v06_static_buffers import layers
from . import graphs
from .engine import build

CAPABILITIES = PREVIOUS + (GRAPH_REPLAY,)

__all__ = ["CAPABILITIES", "build", "graphs", "layers"]
