"""v08's engine, unchanged, running this version's model functions (see v09's engine.py)."""
from __future__ import annotations

from torchlet.contract import Checkpoint

from ..v08_paged_gqa_py.engine import build as build_paged
from . import model


def build(checkpoint: Checkpoint, **options):
    """v08's build (same options) with the Triton layers, KV store and paged decode attention."""
    return build_paged(checkpoint, model=model, **options)
