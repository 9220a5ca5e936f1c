"""The decoder over a ragged batch. Every block except attention works row by row, so it runs on
the whole flat buffer unchanged; attention alone must keep requests apart, which it does by
attending within each request's rows only."""
from __future__ import annotations

from typing import Mapping

import torch

from torchlet.contract import ModelConfig

from ..v00_full_recompute.model import (Weights, apply_rope, causal_attention, linear, lm_head,
                                        mlp, rms_norm)
from .ragged import check_req_indptr, last_rows, req_indptr, row_positions, spans

__all__ = ["Weights", "apply_rope", "attention", "decoder_layer", "forward_ragged", "lm_head",
           "mlp", "rms_norm", "req_indptr", "check_req_indptr", "row_positions", "last_rows"]


def attention(x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
              config: ModelConfig, req_indptr: torch.Tensor | None = None) -> torch.Tensor:
    """Self-attention of a ragged batch x [T, hidden]; without req_indptr, one sequence."""
    t, d = x.shape[0], config.head_dim
    q = linear(x, w, "self_attn.q_proj").view(t, config.num_heads, d)
    k = linear(x, w, "self_attn.k_proj").view(t, config.num_kv_heads, d)
    v = linear(x, w, "self_attn.v_proj").view(t, config.num_kv_heads, d)
    q = apply_rope(q, positions, config.rope_theta)
    k = apply_rope(k, positions, config.rope_theta)
    if req_indptr is None:
        out = causal_attention(q, k, v)
    else:
        # One request never sees another's rows: each span gets its own causal attention.
        out = torch.cat([causal_attention(q[a:b], k[a:b], v[a:b]) for a, b in spans(req_indptr)])
    return linear(out.reshape(t, config.num_heads * d), w, "self_attn.o_proj")


def decoder_layer(x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                  config: ModelConfig, req_indptr: torch.Tensor | None = None) -> torch.Tensor:
    h = x + attention(rms_norm(x, w["input_layernorm.weight"], config.rms_eps), positions, w,
                      config, req_indptr)
    return h + mlp(rms_norm(h, w["post_attention_layernorm.weight"], config.rms_eps), w)


def forward_ragged(weights: Weights, token_ids: torch.Tensor, req_indptr: torch.Tensor,
                   layer=decoder_layer) -> torch.Tensor:
    """Final hidden states [T, hidden] of every row of a ragged batch, already through the last
    norm. Positions restart at 0 in each request. `layer` is the decoder layer to stack, so a
    later version that only changes the layer can reuse this loop."""
    check_req_indptr(req_indptr, len(token_ids))
    config = weights.config
    pos = row_positions(req_indptr)
    x = weights.embed[token_ids]
    for w in weights.layers:
        x = layer(x, pos, w, config, req_indptr)
    return rms_norm(x, weights.norm, config.rms_eps)
