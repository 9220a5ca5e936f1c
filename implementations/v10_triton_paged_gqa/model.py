"""v09's decoder with the paged K/V cache on Triton too (paged_kernels.py): the decode step stores
each lane's new K/V with the store kernel and attends with the paged decode-attention kernel, so
the step a graph replays is kernels and matmuls end to end. Prefill stores its K/V with the same
store kernel; its attention stays v09's PyTorch causal attention (a prefill kernel is later work).

On CPU in float64 (the specs' reference dtype), where no kernel runs, both passes keep v08's
PyTorch store and attention, as v09 keeps v00's layers."""
from __future__ import annotations

import torch

from ..v09_triton_basics.model import (Weights, add_rms_norm, apply_rope, attend_per_request,
                                       attention, causal_attention, check_req_indptr,
                                       decoder_layer, forward_layers, forward_ragged,
                                       group_queries, last_rows, lm_head, mlp, on_triton,
                                       output_projection, project_qkv, qkv_heads, req_indptr,
                                       rms_norm, rope_qk, row_positions, split_heads, swiglu,
                                       write_kv)
from ..v09_triton_basics.model import forward_decode_paged as _forward_decode_paged
from ..v09_triton_basics.model import forward_prefill_paged as _forward_prefill_paged
from . import paged_kernels

__all__ = ["Weights", "add_rms_norm", "apply_rope", "attend_per_request", "attention",
           "causal_attention", "check_req_indptr", "decoder_layer", "forward_decode_paged",
           "forward_layers", "forward_prefill_paged", "forward_ragged", "group_queries",
           "last_rows", "lm_head", "mlp", "on_triton", "output_projection", "project_qkv",
           "qkv_heads", "req_indptr", "rms_norm", "rope_qk", "row_positions", "split_heads",
           "swiglu", "write_kv"]


def forward_prefill_paged(weights: Weights, token_ids: torch.Tensor, indptr: torch.Tensor,
                          slot_mapping: torch.Tensor, kv) -> torch.Tensor:
    """v09's prefill, its K/V written by the store kernel. Hidden [T, hidden]."""
    if not on_triton(weights.embed):
        return _forward_prefill_paged(weights, token_ids, indptr, slot_mapping, kv)
    return _forward_prefill_paged(weights, token_ids, indptr, slot_mapping, kv,
                                  store=paged_kernels.store_kv)


def forward_decode_paged(weights: Weights, token_ids: torch.Tensor, positions: torch.Tensor,
                         block_tables: torch.Tensor, context_lens: torch.Tensor,
                         slot_mapping: torch.Tensor, kv) -> torch.Tensor:
    """v09's decode step with the store and paged attention kernels. Hidden [B, hidden]."""
    if not on_triton(weights.embed):
        return _forward_decode_paged(weights, token_ids, positions, block_tables, context_lens,
                                     slot_mapping, kv)
    return _forward_decode_paged(weights, token_ids, positions, block_tables, context_lens,
                                 slot_mapping, kv, store=paged_kernels.store_kv,
                                 paged_attention=paged_kernels.paged_decode_attention)
