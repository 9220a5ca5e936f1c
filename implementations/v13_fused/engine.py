"""v12's engine and options, over this version's decoder."""
from __future__ import annotations

from functools import partial

from ..v12_prefix_cache import OPTIONS, PrefixEngine, PrefixRunner, prefix_build
from .model import layers

__all__ = ["OPTIONS", "PrefixEngine", "build"]

build = partial(prefix_build, "v13", PrefixRunner, PrefixEngine, layers)
