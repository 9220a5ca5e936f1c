"""Attention as six named phases, each a function a reader (or a kernel) can take alone:

    project_qkv -> split_heads -> qk_norm -> rope_qk -> group_queries -> attend_per_request
    -> output_projection

(qk_norm, Qwen3's RMSNorm over each head of q and k, leaves them as they are for other models.)
qkv_heads runs the phases up to the grouped queries, the one place every attention (this one,
the cached ones of later versions) gets its heads from: phase 1, then heads (phases 2-4).

Grouped-query attention stops copying K/V: v00 repeated each KV head for every query head that
reads it (repeat_interleave); here query heads are viewed as [kv_heads, group] so each KV head is
read once by its whole group, the layout a GQA kernel uses.

The phases that make q, k and v and merge the heads back are maths on rows, so they join v00's
functions in this version's ops (GQAOps, the decoder's `ops` from here on: a later version's ops
subclass it). The attention itself, phase 5, is the decoder's: SplitGQADecoder is v01_0's
RaggedDecoder with attention replaced by the phases; its decoder layer and cache-free pass are
v01_0's, and run these phases because they call attention through self."""
from __future__ import annotations

from typing import Mapping

import torch

from torchlet.contract import ModelConfig

from ..v01_0_ragged_batch import RaggedDecoder

__all__ = ["GQAOps", "SplitGQADecoder", "layers"]

v00 = RaggedDecoder.ops  # v00's functions, the maths v01_0's decoder composes


class GQAOps:
    """The maths a decoder calls, reached through self: v00's per-token functions, Qwen3's
    per-head q/k norm, and the attention phases around the attention itself (1-4 and 6)."""

    Weights = v00.Weights
    rms_norm = staticmethod(v00.rms_norm)
    apply_rope = staticmethod(v00.apply_rope)
    rope_cos_sin = staticmethod(v00.rope_cos_sin)
    rotate = staticmethod(v00.rotate)
    linear = staticmethod(v00.linear)
    mlp = staticmethod(v00.mlp)
    lm_head = staticmethod(v00.lm_head)

    def qk_norm(self, q: torch.Tensor, k: torch.Tensor, w: Mapping[str, torch.Tensor],
                config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """v00's per-head q/k norm (Qwen3's) through these ops' rms_norm."""
        return v00.qk_norm(q, k, w, config, self.rms_norm)

    def project_qkv(self, x: torch.Tensor, w: Mapping[str, torch.Tensor]):
        """Phase 1: q [T, heads*D], k and v [T, kv_heads*D], with the biases the model has."""
        return (self.linear(x, w, "self_attn.q_proj"), self.linear(x, w, "self_attn.k_proj"),
                self.linear(x, w, "self_attn.v_proj"))

    def split_heads(self, t: torch.Tensor, num_heads: int) -> torch.Tensor:
        """Phase 2: [T, heads*D] -> [T, heads, D] (a view: head h owns columns h*D:(h+1)*D)."""
        return t.view(t.shape[0], num_heads, t.shape[1] // num_heads)

    def rope_qk(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float):
        """Phase 3: rotate q [T, H, D] and k [T, KV, D] by each row's position (apply_rope);
        v is never rotated."""
        return self.apply_rope(q, positions, theta), self.apply_rope(k, positions, theta)

    def group_queries(self, q: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
        """Phase 4: q [T, heads, D] -> [T, kv_heads, group, D]; query head h = kv * group + g
        reads KV head kv = h // group. A view, no copy."""
        t, heads, d = q.shape
        return q.view(t, num_kv_heads, heads // num_kv_heads, d)

    def output_projection(self, out: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Phase 6: merge the heads back ([T, KV, G, D] -> [T, heads*D], head h = kv*G + g) and
        project with o_proj."""
        return self.linear(out.reshape(out.shape[0], -1), w, "self_attn.o_proj")

    def qkv_heads(self, x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                  config: ModelConfig):
        """Phases 1-4: grouped queries [T, KV, G, D], k and v [T, KV, D]."""
        return self.heads(*self.project_qkv(x, w), positions, w, config)

    def heads(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
              w: Mapping[str, torch.Tensor], config: ModelConfig):
        """Phases 2-4 on projected q, k and v: split into heads, q and k normed per head where
        the model does (qk_norm), then rotated, and the queries grouped. Apart from phase 1, so a
        version that projects otherwise (q, k and v from one GEMM) hands its q, k and v here."""
        q, k = self.split_heads(q, config.num_heads), self.split_heads(k, config.num_kv_heads)
        if config.qk_norm:
            q, k = self.qk_norm(q, k, w, config)
        q, k = self.rope_qk(q, k, positions, config.rope_theta)
        v = self.split_heads(v, config.num_kv_heads)
        return self.group_queries(q, config.num_kv_heads), k, v


class SplitGQADecoder(RaggedDecoder):
    """v01_0's decoder over GQAOps, its attention the six phases over grouped queries."""

    ops = GQAOps()

    # The phases around the attention (the contract's SplitGQALayers) are the ops': named here.
    def project_qkv(self, x: torch.Tensor, w: Mapping[str, torch.Tensor]):
        """Phase 1, the ops'."""
        return self.ops.project_qkv(x, w)

    def split_heads(self, t: torch.Tensor, num_heads: int) -> torch.Tensor:
        """Phase 2, the ops'."""
        return self.ops.split_heads(t, num_heads)

    def qk_norm(self, q: torch.Tensor, k: torch.Tensor, w: Mapping[str, torch.Tensor],
                config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """Qwen3's per-head q/k norm, the ops'."""
        return self.ops.qk_norm(q, k, w, config)

    def rope_qk(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float):
        """Phase 3, the ops'."""
        return self.ops.rope_qk(q, k, positions, theta)

    def group_queries(self, q: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
        """Phase 4, the ops'."""
        return self.ops.group_queries(q, num_kv_heads)

    def output_projection(self, out: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Phase 6, the ops'."""
        return self.ops.output_projection(out, w)

    def causal_attention(self, qg: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Softmax attention of one sequence: qg [T, KV, G, D] over k, v [S, KV, D], where the T
        queries are the last T of the S positions (S == T without a cache), so query i sees keys
        0 .. S - T + i."""
        t, s = qg.shape[0], k.shape[0]
        scores = torch.einsum("tkgd,skd->kgts", qg, k) * qg.shape[-1] ** -0.5
        mask = torch.ones(t, s, dtype=torch.bool, device=qg.device).tril(s - t)
        scores = scores.masked_fill(~mask, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(qg.dtype)
        return torch.einsum("kgts,skd->tkgd", probs, v)

    def attend_per_request(self, qg: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           req_indptr: torch.Tensor) -> torch.Tensor:
        """Phase 5: causal attention of a ragged batch, each request over its own rows only.
        qg [T, KV, G, D], k and v [T, KV, D] -> [T, KV, G, D]."""
        return torch.cat([self.causal_attention(qg[a:b], k[a:b], v[a:b])
                          for a, b in self.spans(req_indptr)])

    def attention(self, x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                  config: ModelConfig, req_indptr: torch.Tensor | None = None) -> torch.Tensor:
        """The phases in order on a ragged batch x [T, hidden]; without req_indptr, one
        sequence."""
        if req_indptr is None:
            req_indptr = torch.tensor([0, x.shape[0]], dtype=torch.int32)
        qg, k, v = self.ops.qkv_heads(x, positions, w, config)
        return self.ops.output_projection(self.attend_per_request(qg, k, v, req_indptr), w)


layers = SplitGQADecoder()
