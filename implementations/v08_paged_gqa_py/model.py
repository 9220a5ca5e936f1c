"""The decoder over a paged K/V cache. Each layer's cache is [num_blocks, block_size, kv_heads,
head_dim]; a token's K/V lives in the slot its request's block table names, and attention reads
through the table (paged_attention.py). Decode keeps v05's fixed lanes; each lane carries its
request's padded block table and context length, so the step's shapes never change.

PagedDecoder is v05's decoder (through v07) with two passes over the paged cache, run by v05's
layer loop. They store K/V and attend through store_kv and paged_decode_attention, this
version's PyTorch functions, which a later version may replace with kernels."""
from __future__ import annotations

import torch

from ..v07_cuda_graph import SlotDecoder
from . import paged_attention

__all__ = ["PagedDecoder", "layers"]

Weights = SlotDecoder.Weights


class PagedDecoder(SlotDecoder):
    """v05's decoder plus the paged decode and prefill passes."""

    store_kv = staticmethod(paged_attention.store_kv)
    paged_decode_attention = staticmethod(paged_attention.paged_decode_attention)

    def forward_decode_paged(self, weights: Weights, token_ids: torch.Tensor,
                             positions: torch.Tensor, block_tables: torch.Tensor,
                             context_lens: torch.Tensor, slot_mapping: torch.Tensor,
                             kv) -> torch.Tensor:
        """One decode step over fixed lanes. Lane b's token goes to slot slot_mapping[b] (an
        idle lane's to a slot of the null block, which no table names for a real token), then
        attends over the context_lens[b] tokens its block table names (0 for an idle lane:
        zeros). Hidden [B, hidden]."""
        config = weights.config
        scale = config.head_dim ** -0.5

        def attend(h, i):
            w, (k_cache, v_cache) = weights.layers[i], kv[i]
            qg, k, v = self.qkv_heads(h, positions, w, config)
            self.store_kv(k, v, k_cache, v_cache, slot_mapping)
            q = qg.reshape(qg.shape[0], config.num_heads, config.head_dim)
            return self.output_projection(self.paged_decode_attention(
                q, k_cache, v_cache, block_tables, context_lens, scale), w)
        return self.forward_layers(weights, weights.embed[token_ids], attend)

    def forward_prefill_paged(self, weights: Weights, token_ids: torch.Tensor,
                              indptr: torch.Tensor, slot_mapping: torch.Tensor,
                              kv) -> torch.Tensor:
        """Whole sequences, ragged, into empty tables: row i's K/V goes to slot slot_mapping[i],
        and each request attends causally over its own rows. Hidden [T, hidden]."""
        config = weights.config
        positions = self.row_positions(indptr)

        def attend(h, i):
            w, (k_cache, v_cache) = weights.layers[i], kv[i]
            qg, k, v = self.qkv_heads(h, positions, w, config)
            self.store_kv(k, v, k_cache, v_cache, slot_mapping)
            return self.output_projection(self.attend_per_request(qg, k, v, indptr), w)
        return self.forward_layers(weights, weights.embed[token_ids], attend)


layers = PagedDecoder()
