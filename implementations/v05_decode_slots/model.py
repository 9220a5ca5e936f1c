"""The decoder over decode slots. The K/V cache is one preallocated tensor per layer,
[slots, max_len, kv_heads, head_dim]: slot s holds the request that owns it, row p its token at
position p. A decode step has exactly one lane per slot, active or not, so its shapes never
change (what v06 and v07 need); prefill stays ragged and writes rows 0 .. len - 1 of each
request's slot."""
from __future__ import annotations

from typing import Mapping

import torch

from torchlet.contract import ModelConfig

from ..v01_1_split_gqa.model import (Weights, apply_rope, attend_per_request, attention,
                                     causal_attention, check_req_indptr, decoder_layer,
                                     forward_ragged, group_queries, last_rows, lm_head, mlp,
                                     output_projection, project_qkv, req_indptr, rms_norm,
                                     rope_qk, row_positions, split_heads)
from ..v01_0_ragged_batch.ragged import spans

__all__ = ["Weights", "apply_rope", "attend_per_request", "attention", "causal_attention",
           "check_req_indptr", "decode_rows", "decoder_layer", "forward_decode",
           "forward_prefill", "forward_ragged", "group_queries", "last_rows", "lm_head", "mlp",
           "output_projection", "project_qkv", "req_indptr", "rms_norm", "rope_qk",
           "row_positions", "slot_attention", "split_heads", "write_kv"]


def write_kv(cache: torch.Tensor, rows: torch.Tensor, new: torch.Tensor) -> None:
    """cache [S, L, KV, D] viewed as S*L rows: new[i] goes to row rows[i] = slot * L + position.
    index_copy_ takes the rows as a tensor, so no value leaves the device."""
    cache.view(-1, *cache.shape[2:]).index_copy_(0, rows, new)


def slot_attention(qg: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   positions: torch.Tensor) -> torch.Tensor:
    """Lane s's query qg[s] [KV, G, D] attends over rows 0 .. positions[s] of slot s. Every lane
    reads all max_len rows, masked: fixed shapes, at the price of reading empty rows."""
    scores = torch.einsum("skgd,slkd->skgl", qg, k_cache) * qg.shape[-1] ** -0.5
    visible = torch.arange(k_cache.shape[1], device=qg.device)[None, :] <= positions[:, None]
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(qg.dtype)
    return torch.einsum("skgl,slkd->skgd", probs, v_cache)


def qkv_heads(x, positions, w, config: ModelConfig):
    q, k, v = project_qkv(x, w)
    q, k = rope_qk(split_heads(q, config.num_heads), split_heads(k, config.num_kv_heads),
                   positions, config.rope_theta)
    return group_queries(q, config.num_kv_heads), k, split_heads(v, config.num_kv_heads)


def residual_block(x, w, config: ModelConfig, attend) -> torch.Tensor:
    """x + attend(norm(x)), then h + mlp(norm(h)): the decoder layer with attention passed in."""
    h = x + attend(rms_norm(x, w["input_layernorm.weight"], config.rms_eps))
    return h + mlp(rms_norm(h, w["post_attention_layernorm.weight"], config.rms_eps), w)


def decode_rows(active: torch.Tensor, positions: torch.Tensor, cache_slots: int,
                max_len: int) -> torch.Tensor:
    """Cache row of each lane's new K/V: lane s writes slot s, row positions[s]; an inactive lane
    writes into the sink slot (the cache's last), so whatever it carries lands where nobody reads."""
    lanes = torch.arange(active.shape[0], device=active.device)
    slot = torch.where(active, lanes, cache_slots - 1)
    return slot * max_len + positions % max_len


def forward_decode(weights: Weights, token_ids: torch.Tensor, positions: torch.Tensor,
                   active: torch.Tensor, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """One decode step over the first `lanes` slots, lane s = slot s: token_ids[s] at
    positions[s]. kv[layer] = (k_cache, v_cache), each [slots + 1, L, KV, D], the last slot a sink
    for inactive lanes. Writes each active lane's K/V to row positions[s] of its slot, then
    attends over rows 0 .. positions[s]. Hidden [lanes, hidden]; inactive lanes' rows are garbage."""
    config = weights.config
    lanes = token_ids.shape[0]
    assert lanes < kv[0][0].shape[0], "at most one lane per slot; the last slot is the sink"
    rows = decode_rows(active, positions, kv[0][0].shape[0], kv[0][0].shape[1])
    x = weights.embed[token_ids]
    for w, (k_cache, v_cache) in zip(weights.layers, kv):
        def attend(h, w=w, k_cache=k_cache, v_cache=v_cache):
            qg, k, v = qkv_heads(h, positions, w, config)
            write_kv(k_cache, rows, k)
            write_kv(v_cache, rows, v)
            return output_projection(slot_attention(qg, k_cache[:lanes], v_cache[:lanes],
                                                    positions), w)
        x = residual_block(x, w, config, attend)
    return rms_norm(x, weights.norm, config.rms_eps)


def forward_prefill(weights: Weights, token_ids: torch.Tensor, indptr: torch.Tensor,
                    slots: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Whole prompts, ragged: request i's rows go to rows 0 .. len - 1 of slot slots[i], and it
    attends causally over its own rows. Hidden [T, hidden]."""
    config = weights.config
    positions = row_positions(indptr)
    length = kv[0][0].shape[1]
    slot_of_row = torch.tensor(slots, device=token_ids.device).repeat_interleave(
        (indptr[1:] - indptr[:-1]).long())
    rows = slot_of_row * length + positions
    x = weights.embed[token_ids]
    for w, (k_cache, v_cache) in zip(weights.layers, kv):
        def attend(h, w=w, k_cache=k_cache, v_cache=v_cache):
            qg, k, v = qkv_heads(h, positions, w, config)
            write_kv(k_cache, rows, k)
            write_kv(v_cache, rows, v)
            out = torch.cat([causal_attention(qg[a:b], k[a:b], v[a:b]) for a, b in spans(indptr)])
            return output_projection(out, w)
        x = residual_block(x, w, config, attend)
    return rms_norm(x, weights.norm, config.rms_eps)
