"""v08's engine, unchanged, running this version's model functions: the runner calls whatever
model module it is given, so the Triton layers need no engine code of their own."""
from __future__ import annotations

from types import ModuleType

from torchlet.contract import Checkpoint

from ..v08_paged_gqa_py import build as build_paged
from . import model as triton_model


def build(checkpoint: Checkpoint, *, model: ModuleType = triton_model, **options):
    """v08's build (same options: device, dtype, max_decode_slots, use_graphs, num_blocks, ...)
    with the Triton layers in every pass; model, the module of model functions every pass calls,
    is this version's model.py unless another is given."""
    return build_paged(checkpoint, model=model, **options)
