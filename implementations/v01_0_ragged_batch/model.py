"""The decoder over a ragged batch. Every block except attention works row by row, so it runs on
the whole flat buffer unchanged; attention alone must keep requests apart, which it does by
attending within each request's rows only.

From here on the decoder is a part, a class whose functions call each other through `self`, and
it composes a second part, its maths (`ops`): the per-token layers (norm, RoPE, MLP, the
projections) a decoder calls but never changes. Here the ops are v00's functions as they are
(its module); a later version that changes how a layer computes (attention in named phases,
the rotation once per pass, kernels) hands the decoder other ops, and one that changes where K/V
live subclasses the decoder or hands it a memory part. What callers use of the ops (the weights'
class, the LM head, the contract's per-token layers) the decoder names, each the ops' own, so
`layers.rms_norm` is the ops'. The version's `layers` is an instance."""
from __future__ import annotations

from functools import cached_property
from typing import Mapping

import torch

from torchlet.contract import ModelConfig

from ..v00_full_recompute import layers as v00
from . import ragged

__all__ = ["RaggedDecoder", "Weights", "layers"]

Weights = v00.Weights


class RaggedDecoder:
    """The decoder's functions as one part (the version's `layers`), each reaching the others
    through self, and the maths they call through self.ops."""

    # v00's blocks, unchanged: they work row by row, so a ragged batch is just more rows.
    ops = v00
    causal_attention = staticmethod(v00.causal_attention)
    # The ragged batch's bookkeeping (ragged.py).
    req_indptr = staticmethod(ragged.req_indptr)
    check_req_indptr = staticmethod(ragged.check_req_indptr)
    spans = staticmethod(ragged.spans)
    row_positions = staticmethod(ragged.row_positions)
    last_rows = staticmethod(ragged.last_rows)

    # What callers use of the ops, named here: the class a runner loads weights into, the LM
    # head, and the per-token layers the contract's Layers names. Each is the ops' own, whichever
    # ops this decoder holds (a later version's decoder holds others).
    @property
    def Weights(self) -> type:
        """The class a runner loads a checkpoint into: the ops'."""
        return self.ops.Weights

    @cached_property
    def lm_head(self):
        """The ops' LM head (weights, hidden -> logits), held once read: a decode step calls it
        with no frame of the decoder's in between (spec/test_layout.py bounds what a step
        runs)."""
        return self.ops.lm_head

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """The ops' RMSNorm."""
        return self.ops.rms_norm(x, weight, eps)

    def apply_rope(self, x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
        """The ops' rotation of x [T, heads, D] by each row's position."""
        return self.ops.apply_rope(x, positions, theta)

    def mlp(self, x: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The ops' MLP."""
        return self.ops.mlp(x, w)

    def attention(self, x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                  config: ModelConfig, req_indptr: torch.Tensor | None = None) -> torch.Tensor:
        """Self-attention of a ragged batch x [T, hidden]; without req_indptr, one sequence."""
        t, d, ops = x.shape[0], config.head_dim, self.ops
        q = ops.linear(x, w, "self_attn.q_proj").view(t, config.num_heads, d)
        k = ops.linear(x, w, "self_attn.k_proj").view(t, config.num_kv_heads, d)
        v = ops.linear(x, w, "self_attn.v_proj").view(t, config.num_kv_heads, d)
        q, k = ops.qk_norm(q, k, w, config)
        q = ops.apply_rope(q, positions, config.rope_theta)
        k = ops.apply_rope(k, positions, config.rope_theta)
        if req_indptr is None:
            out = self.causal_attention(q, k, v)
        else:
            # One request never sees another's rows: each span gets its own causal attention.
            out = torch.cat([self.causal_attention(q[a:b], k[a:b], v[a:b])
                             for a, b in self.spans(req_indptr)])
        return ops.linear(out.reshape(t, config.num_heads * d), w, "self_attn.o_proj")

    def decoder_layer(self, x: torch.Tensor, positions: torch.Tensor,
                      w: Mapping[str, torch.Tensor], config: ModelConfig,
                      req_indptr: torch.Tensor | None = None) -> torch.Tensor:
        """v00's pre-norm residual block, its attention kept within each request."""
        ops = self.ops
        h = x + self.attention(ops.rms_norm(x, w["input_layernorm.weight"], config.rms_eps),
                               positions, w, config, req_indptr)
        return h + ops.mlp(ops.rms_norm(h, w["post_attention_layernorm.weight"], config.rms_eps),
                           w)

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
        return self.ops.rms_norm(x, weights.norm, config.rms_eps)


layers = RaggedDecoder()
