"""A plain-PyTorch decode step in the style of gpt-fast: the anchor a version's step is held to.

Per layer one static K/V cache [batch, KV heads, length, head_dim], one fused q/k/v weight and
one fused gate/up weight; RoPE read from cos/sin tables computed once; torch SDPA over the whole
cache under a mask of each request's positions; greedy argmax inside the step, so that its
tokens feed the next step as an engine's do. Query heads are not repeated per K/V head: the
heads of one group ride as extra query rows of their K/V head, so SDPA reads each K/V once.
Nothing here comes from implementations/: an anchor must not share a defect with what it
measures (spec/test_bench_anchors.py holds its tokens to Hugging Face's float64 model).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from torchlet.contract import Checkpoint


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As Hugging Face's RMSNorm: the statistics in float32, the weight in the input's dtype."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class StaticModel:
    """The checkpoint's weights fused, caches for `batch` requests of up to `max_len` tokens."""

    def __init__(self, checkpoint: Checkpoint, batch: int, max_len: int, device, dtype):
        c, t = checkpoint.config, checkpoint.tensors
        self.config, self.batch, self.max_len = c, batch, max_len

        def get(name):
            return t[name].to(device=device, dtype=dtype)

        self.layers = []
        for i in range(c.num_layers):
            p = f"model.layers.{i}."
            attn, mlp = p + "self_attn.", p + "mlp."
            qkv = torch.cat([get(attn + f"{x}_proj.weight") for x in "qkv"])
            bias = torch.cat([get(attn + f"{x}_proj.bias") for x in "qkv"]) if c.qkv_bias else None
            norms = (get(attn + "q_norm.weight"), get(attn + "k_norm.weight")) if c.qk_norm \
                else (None, None)
            self.layers.append((get(p + "input_layernorm.weight"), qkv, bias, *norms,
                                get(attn + "o_proj.weight"),
                                get(p + "post_attention_layernorm.weight"),
                                torch.cat([get(mlp + "gate_proj.weight"),
                                           get(mlp + "up_proj.weight")]),
                                get(mlp + "down_proj.weight")))
        self.embed = get("model.embed_tokens.weight")
        self.lm_head = self.embed if c.tie_embeddings else get("lm_head.weight")
        self.norm = get("model.norm.weight")
        shape = (batch, c.num_kv_heads, max_len, c.head_dim)
        self.k_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        self.v_cache = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        # As Hugging Face computes them (float32, then the model's dtype), so that parity is exact.
        d = c.head_dim
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        freqs = torch.outer(torch.arange(max_len, dtype=torch.float32), inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos, self.sin = (f(emb).to(device=device, dtype=dtype) for f in (torch.cos, torch.sin))
        self.layer_fn, self.head_fn = self.layer, self.head

    def compile(self, mode: str | None) -> None:
        """One compiled layer serves every layer (their tensors are arguments, not constants),
        so compiling costs one layer's trace, not the model's."""
        kwargs = {} if mode in (None, "default") else {"mode": mode}
        self.layer_fn = torch.compile(self.layer, fullgraph=True, dynamic=False, **kwargs)
        self.head_fn = torch.compile(self.head, fullgraph=True, dynamic=False, **kwargs)

    def layer(self, h, weights, k_cache, v_cache, cos, sin, mask, rows, positions):
        """h [B, T, hidden], the residual stream; K/V of `positions` [B, T] written to the
        caches' `rows` [B, 1] first, then every request attends over its whole cache row."""
        c = self.config
        ln1, wqkv, bias, q_norm, k_norm, wo, ln2, wgu, wd = weights
        b, t, _ = h.shape
        hd, nq, nkv = c.head_dim, c.num_heads, c.num_kv_heads
        q, k, v = F.linear(rms_norm(h, ln1, c.rms_eps), wqkv, bias).split(
            [nq * hd, nkv * hd, nkv * hd], dim=-1)
        q, k, v = q.view(b, t, nq, hd), k.view(b, t, nkv, hd), v.view(b, t, nkv, hd)
        if q_norm is not None:
            q, k = rms_norm(q, q_norm, c.rms_eps), rms_norm(k, k_norm, c.rms_eps)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        k_cache[rows, :, positions] = k
        v_cache[rows, :, positions] = v
        group = nq // nkv
        q = q.view(b, t, nkv, group, hd).permute(0, 2, 3, 1, 4).reshape(b, nkv, group * t, hd)
        out = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)
        out = out.view(b, nkv, group, t, hd).permute(0, 3, 1, 2, 4).reshape(b, t, nq * hd)
        h = h + F.linear(out, wo)
        gate, up = F.linear(rms_norm(h, ln2, c.rms_eps), wgu).chunk(2, dim=-1)
        return h + F.linear(F.silu(gate) * up, wd)

    def head(self, h, norm, lm_head):
        return F.linear(rms_norm(h, norm, self.config.rms_eps), lm_head)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, first_row: int = 0):
        """tokens and positions [B, T] of cache rows first_row .. first_row + B - 1: the last
        position's logits [B, vocab]."""
        b, t = tokens.shape
        rows = torch.arange(b, device=tokens.device)[:, None]
        group = self.config.num_heads // self.config.num_kv_heads
        seen = torch.arange(self.max_len, device=tokens.device) <= positions[..., None]
        if t == 1:  # a decode step: one mask row a request, broadcast over its heads' rows
            mask = seen[:, None]
        else:  # a query row per head of the group and position, ordered as layer() orders q
            mask = seen[:, None, None].expand(b, 1, group, t, self.max_len).reshape(
                b, 1, group * t, self.max_len)
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]
        h = self.embed[tokens]
        span = slice(first_row, first_row + b)
        for weights, k_cache, v_cache in zip(self.layers, self.k_cache, self.v_cache):
            h = self.layer_fn(h, weights, k_cache[span], v_cache[span], cos, sin, mask, rows,
                              positions)
        return self.head_fn(h[:, -1], self.norm, self.lm_head)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One greedy decode step of every request: tokens and positions [batch] -> next tokens."""
        return self.forward(tokens[:, None], positions[:, None]).argmax(-1)

    def prefill(self, row: int, prompt: list[int]) -> int:
        """One request's prompt into its cache row at positions 0..; its first token."""
        device = self.embed.device
        tokens = torch.tensor([prompt], device=device)
        positions = torch.arange(len(prompt), device=device)[None]
        return int(self.forward(tokens, positions, first_row=row).argmax(-1))

    def matmuls(self):
        """The step's GEMMs alone, on inputs of their shapes: per layer q/k/v, o, gate/up and
        down, then the LM head, through torch's own matmul (cuBLAS on a GPU)."""
        c, b = self.config, self.batch
        x = torch.randn(b, c.hidden_size, device=self.embed.device, dtype=self.embed.dtype)
        attn = torch.randn(b, c.num_heads * c.head_dim, device=x.device, dtype=x.dtype)
        act = torch.randn(b, c.intermediate_size, device=x.device, dtype=x.dtype)

        def run():
            for _, wqkv, bias, _, _, wo, _, wgu, wd in self.layers:
                F.linear(x, wqkv, bias)
                F.linear(attn, wo)
                F.linear(x, wgu)
                F.linear(act, wd)
            F.linear(x, self.lm_head)
        return run
