"""The decoder with a K/V cache. A batch row is a request's *new* token; attention reads the
request's cached keys and values for everything before it. Prefill and decode are the same
computation: prefill brings a whole prompt to an empty cache, decode one token to a full one.

CachedDecoder is v01_1's decoder with a cached pass beside the cache-free one: the phases are
v01_1's; only the attention step changes: append this step's k, v to the cache, then attend over
the whole history (causal_attention handles S keys > T queries).

A prefill is now a pass of its own over a whole prompt, and v01_1's causal_attention, written to
be read, builds every head's T x T scores for it: 9 x 5,480 x 5,480 floats a layer (1 GB) for a
long prompt to SmolLM2. So causal_attention is one fused call here (torch's
scaled_dot_product_attention: the same softmax, in tiles, never all the scores at once), for
every version after this one; v01_1's phases stay the reading and the reference."""
from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from torchlet.contract import ModelConfig

from ..v01_1_split_gqa import SplitGQADecoder
from .kv import LayerKV

__all__ = ["CachedDecoder", "layers"]

# Not cuDNN's: it builds a plan for every new (queries, keys) shape, tens of milliseconds each,
# and every prompt length is a new shape (measured on the H200: the 256-request workload took
# 23 s with it, docs/perf-notes.md).
BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


class CachedDecoder(SplitGQADecoder):
    """v01_1's decoder plus the pass over each request's cache (forward_cached), its causal
    attention one fused call."""

    def causal_attention(self, qg: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """v01_1's causal attention of T queries (the last T of S positions) as one fused call:
        qg [T, KV, G, D] over k, v [S, KV, D] -> [T, KV, G, D]. Query head kv * G + g reads KV
        head kv, as enable_gqa has it."""
        t, kv_heads, group, d = qg.shape
        s = k.shape[0]
        q = qg.reshape(t, kv_heads * group, d).transpose(0, 1)[None]
        keys, values = k.transpose(0, 1)[None], v.transpose(0, 1)[None]
        if s == t:
            mask = {"is_causal": True}  # aligned to the top left, which is the bottom right here
        elif t == 1:
            mask = {}  # one query, the last position: it sees every key
        else:  # rows after a cached prefix: [T, S], not per head
            mask = {"attn_mask": torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)}
        with sdpa_kernel(BACKENDS):
            out = torch.nn.functional.scaled_dot_product_attention(q, keys, values,
                                                                   enable_gqa=True, **mask)
        return out[0].transpose(0, 1).reshape(t, kv_heads, group, d)

    def attend_over_cache(self, qg: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          req_indptr: torch.Tensor, kv: Sequence[LayerKV]) -> torch.Tensor:
        """Phase 5 with a cache: request i's new k, v rows join kv[i], then its new queries
        attend over everything it has cached, causally."""
        out = []
        for (a, b), cache in zip(self.spans(req_indptr), kv):
            keys, values = cache.append(k[a:b], v[a:b])
            out.append(self.causal_attention(qg[a:b], keys, values))
        return torch.cat(out)

    def attention_cached(self, x: torch.Tensor, positions: torch.Tensor,
                         w: Mapping[str, torch.Tensor], config: ModelConfig,
                         req_indptr: torch.Tensor, kv: Sequence[LayerKV]) -> torch.Tensor:
        qg, k, v = self.ops.qkv_heads(x, positions, w, config)
        return self.ops.output_projection(self.attend_over_cache(qg, k, v, req_indptr, kv), w)

    def decoder_layer_cached(self, x: torch.Tensor, positions: torch.Tensor,
                             w: Mapping[str, torch.Tensor], config: ModelConfig,
                             req_indptr: torch.Tensor, kv: Sequence[LayerKV]) -> torch.Tensor:
        ops = self.ops
        h = x + self.attention_cached(ops.rms_norm(x, w["input_layernorm.weight"],
                                                   config.rms_eps),
                                      positions, w, config, req_indptr, kv)
        return h + ops.mlp(ops.rms_norm(h, w["post_attention_layernorm.weight"], config.rms_eps),
                           w)

    def forward_cached(self, weights, token_ids: torch.Tensor, req_indptr: torch.Tensor,
                       kv: Sequence[Sequence[LayerKV]]) -> torch.Tensor:
        """Final hidden states [T, hidden] of the new rows of a ragged batch. kv[i][layer] is
        request i's cache; each request's rows sit at the positions after the tokens it has
        cached."""
        self.check_req_indptr(req_indptr, len(token_ids))
        config = weights.config
        pos = self.row_positions(req_indptr, offsets=[len(layers[0]) for layers in kv])
        x = weights.embed[token_ids]
        for i, w in enumerate(weights.layers):
            x = self.decoder_layer_cached(x, pos, w, config, req_indptr,
                                          [layers[i] for layers in kv])
        return self.ops.rms_norm(x, weights.norm, config.rms_eps)


layers = CachedDecoder()
