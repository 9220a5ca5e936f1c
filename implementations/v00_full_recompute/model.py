"""The decoder as plain functions over tensors: embedding, RMSNorm, RoPE, grouped-query
attention with optional qkv bias and optional per-head q/k norms (Qwen3), SwiGLU MLP, tied or
untied LM head."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from torchlet.contract import Checkpoint, ModelConfig, cast_tensors, layer_tensors


@dataclass
class Weights:
    """The checkpoint's tensors on one device and dtype, grouped the way forward() reads them."""

    config: ModelConfig
    embed: torch.Tensor
    layers: list[dict[str, torch.Tensor]]
    norm: torch.Tensor
    lm_head: torch.Tensor

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint, device="cpu", dtype=torch.float32) -> "Weights":
        t = cast_tensors(ckpt.tensors, device, dtype)
        embed = t["model.embed_tokens.weight"]
        lm_head = embed if ckpt.config.tie_embeddings else t["lm_head.weight"]
        layers = [cast_tensors(layer_tensors(ckpt, i), device, dtype)
                  for i in range(ckpt.config.num_layers)]
        return cls(ckpt.config, embed, layers, t["model.norm.weight"], lm_head)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps), the mean taken in float32."""
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos and sin [tokens, head_dim] of the rotation angles position * theta^(-2i/head_dim)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                            dtype=torch.float32) / head_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [tokens, heads, head_dim] turned by the angles whose cos and sin [tokens, head_dim]
    rope_cos_sin gives: the first and second halves of the head dimension are the real and
    imaginary parts (Hugging Face's rotate_half layout)."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate each head of x [tokens, heads, head_dim] by its row's position."""
    return rotate(x, *rope_cos_sin(positions, x.shape[-1], theta, x.dtype))


def linear(x: torch.Tensor, w: Mapping[str, torch.Tensor], name: str) -> torch.Tensor:
    return torch.nn.functional.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))


def qk_norm(q: torch.Tensor, k: torch.Tensor, w: Mapping[str, torch.Tensor], config: ModelConfig,
            norm=rms_norm) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3's RMSNorm of each head of q [T, H, D] and k [T, KV, D] over its D values (weights
    q_norm and k_norm, [D] each), before RoPE; q and k as they are for a model without
    (config.qk_norm). `norm` is the RMSNorm to run (a decoder's own)."""
    if not config.qk_norm:
        return q, k
    return (norm(q, w["self_attn.q_norm.weight"], config.rms_eps),
            norm(k, w["self_attn.k_norm.weight"], config.rms_eps))


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention of q [T, H, D] over k, v [T, KV, D] with a causal mask. Query head h
    reads KV head h // (H / KV)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * q.shape[-1] ** -0.5
    t = q.shape[0]
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.einsum("hqk,khd->qhd", probs, v)


def attention(x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
              config: ModelConfig) -> torch.Tensor:
    """Self-attention of one sequence x [T, hidden] at the given positions."""
    t, d = x.shape[0], config.head_dim
    q = linear(x, w, "self_attn.q_proj").view(t, config.num_heads, d)
    k = linear(x, w, "self_attn.k_proj").view(t, config.num_kv_heads, d)
    v = linear(x, w, "self_attn.v_proj").view(t, config.num_kv_heads, d)
    q, k = qk_norm(q, k, w, config)
    q = apply_rope(q, positions, config.rope_theta)
    k = apply_rope(k, positions, config.rope_theta)
    out = causal_attention(q, k, v)
    return linear(out.reshape(t, config.num_heads * d), w, "self_attn.o_proj")


def mlp(x: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """SwiGLU: down(silu(gate(x)) * up(x))."""
    gate = torch.nn.functional.silu(linear(x, w, "mlp.gate_proj"))
    return linear(gate * linear(x, w, "mlp.up_proj"), w, "mlp.down_proj")


def decoder_layer(x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                  config: ModelConfig) -> torch.Tensor:
    """Pre-norm residual block: x + attention(norm(x)), then h + mlp(norm(h))."""
    h = x + attention(rms_norm(x, w["input_layernorm.weight"], config.rms_eps), positions, w, config)
    return h + mlp(rms_norm(h, w["post_attention_layernorm.weight"], config.rms_eps), w)


def forward(weights: Weights, token_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Final hidden states [T, hidden] of one sequence, already through the last norm."""
    config = weights.config
    x = weights.embed[token_ids]
    for w in weights.layers:
        x = decoder_layer(x, positions, w, config)
    return rms_norm(x, weights.norm, config.rms_eps)


def lm_head(weights: Weights, hidden: torch.Tensor) -> torch.Tensor:
    return hidden @ weights.lm_head.T
