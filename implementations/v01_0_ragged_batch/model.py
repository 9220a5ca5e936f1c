"""The decoder over a ragged batch. Every block except attention works row by row, so it runs on
the whole flat buffer unchanged; attention alone must keep requests apart, which it does by
attending within each request's rows only.

From here on the decoder is one part, a class whose functions call each other through `self`:
RaggedDecoder holds v00's blocks as they are and replaces attention. A later version subclasses
it and overrides only the functions its idea changes (v01_1 the attention phases, v09 the
per-token layers); every function that calls one of those runs the new one, so none is copied
to reach it. The version's `layers` is an instance."""
from __future__ import annotations

from typing import Mapping

import torch

from torchlet.contract import ModelConfig

from ..v00_full_recompute import layers as v00
from . import ragged

__all__ = ["RaggedDecoder", "Weights", "layers"]

Weights = v00.Weights


class RaggedDecoder:
    """The decoder's functions as one part (the version's `layers`), each reaching the others
    through self."""

    # v00's blocks, unchanged: they work row by row, so a ragged batch is just more rows.
    Weights = Weights
    rms_norm = staticmethod(v00.rms_norm)
    apply_rope = staticmethod(v00.apply_rope)
    rope_cos_sin = staticmethod(v00.rope_cos_sin)
    rotate = staticmethod(v00.rotate)
    linear = staticmethod(v00.linear)
    causal_attention = staticmethod(v00.causal_attention)
    mlp = staticmethod(v00.mlp)
    lm_head = staticmethod(v00.lm_head)
    # The ragged batch's bookkeeping (ragged.py).
    req_indptr = staticmethod(ragged.req_indptr)
    check_req_indptr = staticmethod(ragged.check_req_indptr)
    spans = staticmethod(ragged.spans)
    row_positions = staticmethod(ragged.row_positions)
    last_rows = staticmethod(ragged.last_rows)

    def attention(self, x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                  config: ModelConfig, req_indptr: torch.Tensor | None = None) -> torch.Tensor:
        """Self-attention of a ragged batch x [T, hidden]; without req_indptr, one sequence."""
        t, d = x.shape[0], config.head_dim
        q = self.linear(x, w, "self_attn.q_proj").view(t, config.num_heads, d)
        k = self.linear(x, w, "self_attn.k_proj").view(t, config.num_kv_heads, d)
        v = self.linear(x, w, "self_attn.v_proj").view(t, config.num_kv_heads, d)
        q, k = self.qk_norm(q, k, w, config)
        q = self.apply_rope(q, positions, config.rope_theta)
        k = self.apply_rope(k, positions, config.rope_theta)
        if req_indptr is None:
            out = self.causal_attention(q, k, v)
        else:
            # One request never sees another's rows: each span gets its own causal attention.
            out = torch.cat([self.causal_attention(q[a:b], k[a:b], v[a:b])
                             for a, b in self.spans(req_indptr)])
        return self.linear(out.reshape(t, config.num_heads * d), w, "self_attn.o_proj")

    def qk_norm(self, q: torch.Tensor, k: torch.Tensor, w: Mapping[str, torch.Tensor],
                config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """v00's per-head q/k norm (Qwen3's) through this decoder's rms_norm."""
        return v00.qk_norm(q, k, w, config, self.rms_norm)

    def decoder_layer(self, x: torch.Tensor, positions: torch.Tensor,
                      w: Mapping[str, torch.Tensor], config: ModelConfig,
                      req_indptr: torch.Tensor | None = None) -> torch.Tensor:
        """v00's pre-norm residual block, its attention kept within each request."""
        h = x + self.attention(self.rms_norm(x, w["input_layernorm.weight"], config.rms_eps),
                               positions, w, config, req_indptr)
        return h + self.mlp(self.rms_norm(h, w["post_attention_layernorm.weight"],
                                          config.rms_eps), w)

    def forward_ragged(self, weights: Weights, token_ids: torch.Tensor,
                       req_indptr: torch.Tensor) -> torch.Tensor:
        """Final hidden states [T, hidden] of every row of a ragged batch, already through the
        last norm. Positions restart at 0 in each request."""
        self.check_req_indptr(req_indptr, len(token_ids))
        config = weights.config
        pos = self.row_positions(req_indptr)
        x = weights.embed[token_ids]
        for w in weights.layers:
            x = self.decoder_layer(x, pos, w, config, req_indptr)
        return self.rms_norm(x, weights.norm, config.rms_eps)


layers = RaggedDecoder()
