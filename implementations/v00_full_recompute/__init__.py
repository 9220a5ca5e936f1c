"""v00_full_recompute: a Qwen2.5-style decoder and greedy generation that re-runs the whole
sequence at every step. The baseline every later version is measured against.

Parts: the model (model.py, its functions; exported as `layers`) and the loop that re-runs it
(loop.py: FullRecomputeEngine)."""
from torchlet.contract import GENERATE, Recipe

from . import model as layers
from .loop import FullRecomputeEngine

CAPABILITIES = (GENERATE,)
PARTS = Recipe.first("v00", model=layers, loop=FullRecomputeEngine)
OPTIONS = PARTS.options  # none: build takes device and dtype only
build = PARTS.build

__all__ = ["CAPABILITIES", "OPTIONS", "PARTS", "build", "layers"]
