"""v08's engine, unchanged, running this version's model functions: the runner calls whatever
model module it is given, so the Triton layers need no engine code of their own."""
from __future__ import annotations

from torchlet.contract import Checkpoint

from ..v08_paged_gqa_py.engine import build as build_paged
from . import model


def build(checkpoint: Checkpoint, **options):
    """v08's build (same options: device, dtype, max_decode_slots, use_graphs, num_blocks, ...)
    with the Triton layers in every pass."""
    return build_paged(checkpoint, model=model, **options)
