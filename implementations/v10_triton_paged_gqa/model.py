"""v09's decoder with the paged K/V cache on Triton too (paged_kernels.py): the decode step stores
each lane's new K/V with the store kernel and attends with the paged decode-attention kernel, so
the step a graph replays is kernels and matmuls end to end. Prefill stores its K/V with the same
store kernel; its attention stays v09's PyTorch causal attention (a prefill kernel is later work).

The decoder is v08's over v09's ops; only its memory changes: TritonPagedAttention is v08's
PagedAttention with the two functions its passes store and attend through, store_kv and
paged_decode_attention, overridden; the passes themselves are v08's. On CPU in float64 (the
specs' reference dtype), where no kernel runs, both keep v08's PyTorch functions, as v09's ops
keep v00's layers."""
from __future__ import annotations

import torch

from ..v09_triton_basics import layers as previous
from . import paged_kernels

__all__ = ["TritonPagedAttention", "TritonPagedDecoder", "layers"]

TritonPagedDecoder = type(previous)  # the decoder this version runs: v08's


class TritonPagedAttention(type(previous.memory)):
    """v08's paged memory, its K/V store and decode attention on the kernels."""

    def store_kv(self, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
        """Write k, v [T, kv_heads, head_dim] into the slots slot_mapping names: the store
        kernel."""
        if self.model.ops.on_triton(k):
            return paged_kernels.store_kv(k, v, k_cache, v_cache, slot_mapping)
        return super().store_kv(k, v, k_cache, v_cache, slot_mapping)

    def paged_decode_attention(self, q: torch.Tensor, k_cache: torch.Tensor,
                               v_cache: torch.Tensor, block_tables: torch.Tensor,
                               context_lens: torch.Tensor, scale: float) -> torch.Tensor:
        """q [B, heads, head_dim] over the first context_lens[b] tokens its block table names:
        the paged decode-attention kernel."""
        if self.model.ops.on_triton(q):
            return paged_kernels.paged_decode_attention(q, k_cache, v_cache, block_tables,
                                                        context_lens, scale)
        return super().paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens,
                                              scale)


layers = TritonPagedDecoder(type(previous.ops)(), TritonPagedAttention)
