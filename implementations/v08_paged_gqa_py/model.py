"""The decoder over a paged K/V cache. Each layer's cache is [num_blocks, block_size, kv_heads,
head_dim]; a token's K/V lives in the slot its request's block table names, and attention reads
through the table (paged_attention.py). Decode keeps v05's fixed lanes; each lane carries its
request's padded block table and context length, so the step's shapes never change."""
from __future__ import annotations

import torch

from ..v01_0_ragged_batch.ragged import spans
from ..v01_1_split_gqa.model import causal_attention, output_projection, row_positions
from ..v05_decode_slots.model import (Weights, apply_rope, attend_per_request, attention,
                                      check_req_indptr, decoder_layer, forward_ragged,
                                      group_queries, last_rows, lm_head, mlp, project_qkv,
                                      qkv_heads, req_indptr, residual_block, rms_norm, rope_qk,
                                      split_heads, write_kv)
from .paged_attention import paged_decode_attention

__all__ = ["Weights", "apply_rope", "attend_per_request", "attention", "causal_attention",
           "check_req_indptr", "decoder_layer", "forward_decode_paged", "forward_prefill_paged",
           "forward_ragged", "group_queries", "last_rows", "lm_head", "mlp", "output_projection",
           "project_qkv", "req_indptr", "rms_norm", "rope_qk", "row_positions", "split_heads",
           "write_kv"]


def forward_decode_paged(weights: Weights, token_ids: torch.Tensor, positions: torch.Tensor,
                         block_tables: torch.Tensor, context_lens: torch.Tensor,
                         slot_mapping: torch.Tensor, kv) -> torch.Tensor:
    """One decode step over fixed lanes. Lane b's token goes to slot slot_mapping[b] (an idle
    lane's to a slot of the null block, which no table names for a real token), then attends over
    the context_lens[b] tokens its block table names (0 for an idle lane: zeros). Hidden [B, hidden]."""
    config = weights.config
    scale = config.head_dim ** -0.5
    x = weights.embed[token_ids]
    for w, (k_cache, v_cache) in zip(weights.layers, kv):
        def attend(h, w=w, k_cache=k_cache, v_cache=v_cache):
            qg, k, v = qkv_heads(h, positions, w, config)
            write_kv(k_cache, slot_mapping, k)
            write_kv(v_cache, slot_mapping, v)
            q = qg.reshape(qg.shape[0], config.num_heads, config.head_dim)
            out = paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale)
            return output_projection(out, w)
        x = residual_block(x, w, config, attend)
    return rms_norm(x, weights.norm, config.rms_eps)


def forward_prefill_paged(weights: Weights, token_ids: torch.Tensor, indptr: torch.Tensor,
                          slot_mapping: torch.Tensor, kv) -> torch.Tensor:
    """Whole sequences, ragged, into empty tables: row i's K/V goes to slot slot_mapping[i], and
    each request attends causally over its own rows. Hidden [T, hidden]."""
    config = weights.config
    positions = row_positions(indptr)
    x = weights.embed[token_ids]
    for w, (k_cache, v_cache) in zip(weights.layers, kv):
        def attend(h, w=w, k_cache=k_cache, v_cache=v_cache):
            qg, k, v = qkv_heads(h, positions, w, config)
            write_kv(k_cache, slot_mapping, k)
            write_kv(v_cache, slot_mapping, v)
            out = torch.cat([causal_attention(qg[a:b], k[a:b], v[a:b]) for a, b in spans(indptr)])
            return output_projection(out, w)
        x = residual_block(x, w, config, attend)
    return rms_norm(x, weights.norm, config.rms_eps)
