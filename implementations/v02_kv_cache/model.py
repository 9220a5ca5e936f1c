"""The decoder with a K/V cache. A batch row is a request's *new* token; attention reads the
request's cached keys and values for everything before it. Prefill and decode are the same
computation: prefill brings a whole prompt to an empty cache, decode one token to a full one.

The phases are v01_1's; only the attention step changes: append this step's k, v to the cache,
then attend over the whole history (v01_1's causal_attention already handles S keys > T
queries)."""
from __future__ import annotations

from typing import Mapping, Sequence

import torch

from torchlet.contract import ModelConfig

from ..v01_1_split_gqa.model import (Weights, apply_rope, attend_per_request, attention,
                                     causal_attention, check_req_indptr, decoder_layer,
                                     forward_ragged, group_queries, last_rows, lm_head, mlp,
                                     output_projection, project_qkv, req_indptr, rms_norm,
                                     rope_qk, row_positions, split_heads)
from ..v01_0_ragged_batch.ragged import spans
from .cache import LayerKV

__all__ = ["Weights", "apply_rope", "attend_over_cache", "attend_per_request", "attention",
           "attention_cached", "causal_attention", "check_req_indptr", "decoder_layer",
           "decoder_layer_cached", "forward_cached", "forward_ragged", "group_queries",
           "last_rows", "lm_head", "mlp", "output_projection", "project_qkv", "req_indptr",
           "rms_norm", "rope_qk", "row_positions", "split_heads"]


def attend_over_cache(qg: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      req_indptr: torch.Tensor, kv: Sequence[LayerKV]) -> torch.Tensor:
    """Phase 5 with a cache: request i's new k, v rows join kv[i], then its new queries attend
    over everything it has cached, causally."""
    out = []
    for (a, b), cache in zip(spans(req_indptr), kv):
        keys, values = cache.append(k[a:b], v[a:b])
        out.append(causal_attention(qg[a:b], keys, values))
    return torch.cat(out)


def attention_cached(x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                     config: ModelConfig, req_indptr: torch.Tensor,
                     kv: Sequence[LayerKV]) -> torch.Tensor:
    q, k, v = project_qkv(x, w)
    q, k, v = (split_heads(q, config.num_heads), split_heads(k, config.num_kv_heads),
               split_heads(v, config.num_kv_heads))
    q, k = rope_qk(q, k, positions, config.rope_theta)
    out = attend_over_cache(group_queries(q, config.num_kv_heads), k, v, req_indptr, kv)
    return output_projection(out, w)


def decoder_layer_cached(x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                         config: ModelConfig, req_indptr: torch.Tensor,
                         kv: Sequence[LayerKV]) -> torch.Tensor:
    h = x + attention_cached(rms_norm(x, w["input_layernorm.weight"], config.rms_eps), positions,
                             w, config, req_indptr, kv)
    return h + mlp(rms_norm(h, w["post_attention_layernorm.weight"], config.rms_eps), w)


def forward_cached(weights: Weights, token_ids: torch.Tensor, req_indptr: torch.Tensor,
                   kv: Sequence[Sequence[LayerKV]]) -> torch.Tensor:
    """Final hidden states [T, hidden] of the new rows of a ragged batch. kv[i][layer] is request
    i's cache; each request's rows sit at the positions after the tokens it has cached."""
    check_req_indptr(req_indptr, len(token_ids))
    config = weights.config
    pos = row_positions(req_indptr, offsets=[len(layers[0]) for layers in kv])
    x = weights.embed[token_ids]
    for i, w in enumerate(weights.layers):
        x = decoder_layer_cached(x, pos, w, config, req_indptr, [layers[i] for layers in kv])
    return rms_norm(x, weights.norm, config.rms_eps)
