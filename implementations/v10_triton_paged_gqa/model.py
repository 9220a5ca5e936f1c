"""v09's decoder with the paged K/V cache on Triton too (paged_kernels.py): the decode step stores
each lane's new K/V with the store kernel and attends with the paged decode-attention kernel, so
the step a graph replays is kernels and matmuls end to end. Prefill stores its K/V with the same
store kernel; its attention stays v09's PyTorch causal attention (a prefill kernel is later work).

The decoder is v08's over v09's ops; only its memory changes: TritonPagedAttention is v08's
PagedAttention holding the two kernels (as data, kernels) beside v08's PyTorch functions; the
memory chooses between them once, when an engine's decoder makes it, by v08's rule, and the
passes themselves are v08's. In an engine where no kernel runs (float64, the specs' reference
dtype, or CPU without the interpreter), both keep v08's PyTorch functions, as v09's ops keep
v00's layers."""
from __future__ import annotations

from ..v09_triton_basics import PagedAttention, PagedDecoder, TritonOps
from . import paged_kernels

__all__ = ["TritonPagedAttention", "layers"]


class TritonPagedAttention(PagedAttention):
    """v08's paged memory holding kernels for its K/V store and decode attention, which its
    passes run where the ops run their kernels (v08's choice, functions)."""

    kernels = (paged_kernels.store_kv, paged_kernels.paged_decode_attention)


layers = PagedDecoder()  # v08's decoder, composing this version's ops and memory
layers.ops, layers.Memory = TritonOps(), TritonPagedAttention
