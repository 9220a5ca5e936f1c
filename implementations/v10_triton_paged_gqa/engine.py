"""v09's build, given this version's decoder (the Triton layers, KV store and paged decode
attention): the engine is v08's, unchanged, so there is no engine code of its own."""
from __future__ import annotations

from functools import partial

from ..v09_triton_basics import build as build_triton
from .model import layers

build = partial(build_triton, model=layers)
