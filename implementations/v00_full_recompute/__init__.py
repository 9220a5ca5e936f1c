"""v00_full_recompute: a Qwen2.5-style decoder and greedy generation that re-runs the whole
sequence at every step. The baseline every later version is measured against."""
from torchlet.contract import GENERATE

from . import model as layers
from .engine import build

CAPABILITIES = (GENERATE,)
OPTIONS = ()  # build takes device and dtype only

__all__ = ["CAPABILITIES", "build", "layers"]
