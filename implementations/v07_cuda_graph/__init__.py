"""v07_cuda_graph (TEMPORARY: the graph component alone; the full version, built on v06, replaces
this file and keeps the `graphs` export).

The decode step is captured once per batch-size bucket and replayed afterwards: CUDA graphs on a
GPU, a TorchDispatchMode stand-in on CPU that enforces the same contract.
"""
from torchlet.contract import GRAPH_REPLAY

from ..v00_full_recompute import model as layers
from . import graphs

CAPABILITIES = (GRAPH_REPLAY,)

__all__ = ["CAPABILITIES", "graphs", "layers"]
