"""v08's engine, unchanged, running this version's decoder: the runner calls whatever decoder it
is given, so the Triton layers need no engine code of their own."""
from __future__ import annotations

from torchlet.contract import Checkpoint

from ..v08_paged_gqa_py import build as build_paged
from .model import TritonDecoder, layers


def build(checkpoint: Checkpoint, *, model: TritonDecoder = layers, **options):
    """v08's build (same options: device, dtype, max_decode_slots, use_graphs, num_blocks, ...)
    with the Triton layers in every pass; model, the decoder every pass calls, is this version's
    layers unless another is given."""
    return build_paged(checkpoint, model=model, **options)
