"""v09's decoder with the paged K/V cache on Triton too (paged_kernels.py): the decode step stores
each lane's new K/V with the store kernel and attends with the paged decode-attention kernel, so
the step a graph replays is kernels and matmuls end to end. Prefill stores its K/V with the same
store kernel; its attention stays v09's PyTorch causal attention (a prefill kernel is later work).

The decoder is v08's over v09's ops; only its memory changes: TritonPagedAttention is v08's
PagedAttention with the choice of the two functions its passes store and attend through
(functions) overridden; the passes themselves are v08's. On CPU in float64 (the
specs' reference dtype), where no kernel runs, both keep v08's PyTorch functions, as v09's ops
keep v00's layers."""
from __future__ import annotations

import torch

from ..v09_triton_basics import PagedAttention, PagedDecoder, TritonOps
from . import paged_kernels

__all__ = ["TritonPagedAttention", "layers"]


class TritonPagedAttention(PagedAttention):
    """v08's paged memory, its K/V store and decode attention on the kernels."""

    def functions(self, t: torch.Tensor):
        """The store kernel and the paged decode-attention kernel where the kernels take t (the
        ops' on_triton); elsewhere v08's PyTorch functions."""
        if self.model.ops.on_triton(t):
            return paged_kernels.store_kv, paged_kernels.paged_decode_attention
        return self.pytorch


layers = PagedDecoder()  # v08's decoder, composing this version's ops and memory
layers.ops, layers.Memory = TritonOps(), TritonPagedAttention
