"""v08's decoder with its per-token layers on Triton kernels (kernels.py): RMSNorm, RoPE, SwiGLU,
and the residual add fused into the norm that follows it.

The fusion changes the shape of the layer loop. v08 writes each layer as x + attn(norm(x)), then
h + mlp(norm(h)): every residual add is a pass over the stream, and the norm right after it reads
the sum again. Here each add happens inside the next norm (add_rms_norm returns the normalized
sum and the sum): the attention output joins the stream in the post-attention norm, the MLP output
in the next layer's input norm, and the last MLP output in the final norm. forward_layers holds
that loop once; the ragged, prefill and decode passes differ only in their attention.

The kernels take float32, float16 and bfloat16 on a GPU; on CPU only float32, and only under
Triton's interpreter (TRITON_INTERPRET=1, set before triton is imported; it has no bf16). Other
inputs (float64, the specs' reference dtype; CPU without the interpreter) take v00's PyTorch
functions: same maths, no kernel.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping

import torch

from torchlet.contract import ModelConfig

from ..v00_full_recompute import model as v00
from ..v00_full_recompute.model import linear
from ..v01_0_ragged_batch.ragged import spans
from ..v01_1_split_gqa.model import (Weights, attend_per_request, causal_attention,
                                     check_req_indptr, group_queries, last_rows, lm_head,
                                     output_projection, project_qkv, req_indptr, row_positions,
                                     split_heads)
from ..v05_decode_slots.model import write_kv
from ..v08_paged_gqa_py.paged_attention import paged_decode_attention
from ..v08_paged_gqa_py.paged_attention import store_kv as torch_store_kv
from . import kernels

__all__ = ["Weights", "add_rms_norm", "apply_rope", "attend_per_request", "attention",
           "causal_attention", "check_req_indptr", "decoder_layer", "forward_decode_paged",
           "forward_layers", "forward_prefill_paged", "forward_ragged", "group_queries",
           "last_rows", "lm_head", "mlp", "on_triton", "output_projection", "project_qkv",
           "qkv_heads", "req_indptr", "rms_norm", "rope_qk", "row_positions", "split_heads",
           "swiglu", "write_kv"]


def on_triton(t: torch.Tensor) -> bool:
    """Whether the kernels take t: any of their dtypes on a GPU, float32 on CPU under the
    interpreter."""
    if t.device.type == "cuda":
        return t.dtype in kernels.DTYPES
    return t.dtype == torch.float32 and os.environ.get("TRITON_INTERPRET") == "1"


# --- the per-token layers ------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps), the mean taken in float32: one kernel."""
    return kernels.rms_norm(x, weight, eps) if on_triton(x) else v00.rms_norm(x, weight, eps)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual): the residual add and the norm after it, one pass."""
    if on_triton(x):
        return kernels.add_rms_norm(x, residual, weight, eps)
    total = x + residual
    return v00.rms_norm(total, weight, eps), total


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate each head of x [tokens, heads, head_dim] in the rotate_half layout: one kernel."""
    if on_triton(x):
        return kernels.apply_rope(x, positions, theta)
    return v00.apply_rope(x, positions, theta)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up: one kernel instead of silu, then a multiply."""
    if on_triton(gate):
        return kernels.swiglu(gate, up)
    return torch.nn.functional.silu(gate) * up


def mlp(x: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """down(swiglu(gate(x), up(x)))."""
    return linear(swiglu(linear(x, w, "mlp.gate_proj"), linear(x, w, "mlp.up_proj")), w,
                  "mlp.down_proj")


# --- attention, as v01_1's phases with this version's RoPE ---------------------------------

def rope_qk(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float):
    return apply_rope(q, positions, theta), apply_rope(k, positions, theta)


def qkv_heads(x, positions, w, config: ModelConfig):
    """Phases 1-4: grouped queries [T, KV, G, D], k and v [T, KV, D], q and k rotated."""
    q, k, v = project_qkv(x, w)
    q, k = rope_qk(split_heads(q, config.num_heads), split_heads(k, config.num_kv_heads),
                   positions, config.rope_theta)
    return group_queries(q, config.num_kv_heads), k, split_heads(v, config.num_kv_heads)


def attention(x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
              config: ModelConfig, req_indptr: torch.Tensor | None = None) -> torch.Tensor:
    if req_indptr is None:
        req_indptr = torch.tensor([0, x.shape[0]], dtype=torch.int32)
    qg, k, v = qkv_heads(x, positions, w, config)
    return output_projection(attend_per_request(qg, k, v, req_indptr), w)


def decoder_layer(x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                  config: ModelConfig, req_indptr: torch.Tensor | None = None) -> torch.Tensor:
    """One layer alone (the Layers contract): the attention output's add is fused into the
    post-attention norm; the MLP output's add is left to the caller's next norm, so here a plain
    add."""
    h = rms_norm(x, w["input_layernorm.weight"], config.rms_eps)
    normed, h = add_rms_norm(attention(h, positions, w, config, req_indptr), x,
                             w["post_attention_layernorm.weight"], config.rms_eps)
    return h + mlp(normed, w)


# --- the layer loop and the three passes ---------------------------------------------------

def forward_layers(weights: Weights, x: torch.Tensor,
                   attend: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
    """Embedded rows x through every layer and the final norm, each residual add fused into the
    norm after it. attend(h, i) is layer i's attention output on its normed input h."""
    eps = weights.config.rms_eps
    residual, out = x, None  # out: the last sublayer's output, not yet added to the stream
    for i, w in enumerate(weights.layers):
        if out is None:
            h = rms_norm(residual, w["input_layernorm.weight"], eps)
        else:
            h, residual = add_rms_norm(out, residual, w["input_layernorm.weight"], eps)
        h, residual = add_rms_norm(attend(h, i), residual, w["post_attention_layernorm.weight"],
                                   eps)
        out = mlp(h, w)
    if out is None:
        return rms_norm(residual, weights.norm, eps)
    return add_rms_norm(out, residual, weights.norm, eps)[0]


def forward_ragged(weights: Weights, token_ids: torch.Tensor,
                   req_indptr: torch.Tensor) -> torch.Tensor:
    """Final hidden states [T, hidden] of a ragged batch, no cache (v01_0's contract)."""
    check_req_indptr(req_indptr, len(token_ids))
    config = weights.config
    positions = row_positions(req_indptr)

    def attend(h, i):
        return attention(h, positions, weights.layers[i], config, req_indptr)
    return forward_layers(weights, weights.embed[token_ids], attend)


StoreKV = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


def forward_prefill_paged(weights: Weights, token_ids: torch.Tensor, indptr: torch.Tensor,
                          slot_mapping: torch.Tensor, kv, store: StoreKV = torch_store_kv
                          ) -> torch.Tensor:
    """v08's prefill: row i's K/V goes to slot slot_mapping[i] (through `store`), each request
    attends causally over its own rows. Hidden [T, hidden]."""
    config = weights.config
    positions = row_positions(indptr)

    def attend(h, i):
        w, (k_cache, v_cache) = weights.layers[i], kv[i]
        qg, k, v = qkv_heads(h, positions, w, config)
        store(k, v, k_cache, v_cache, slot_mapping)
        out = torch.cat([causal_attention(qg[a:b], k[a:b], v[a:b]) for a, b in spans(indptr)])
        return output_projection(out, w)
    return forward_layers(weights, weights.embed[token_ids], attend)


def forward_decode_paged(weights: Weights, token_ids: torch.Tensor, positions: torch.Tensor,
                         block_tables: torch.Tensor, context_lens: torch.Tensor,
                         slot_mapping: torch.Tensor, kv, store: StoreKV = torch_store_kv,
                         paged_attention=paged_decode_attention) -> torch.Tensor:
    """v08's decode step over fixed lanes: lane b's K/V goes to slot slot_mapping[b], then it
    attends over the context_lens[b] tokens its block table names. `store` and
    `paged_attention` are v08's PyTorch functions unless a later version passes kernels.
    Hidden [B, hidden]."""
    config = weights.config
    scale = config.head_dim ** -0.5

    def attend(h, i):
        w, (k_cache, v_cache) = weights.layers[i], kv[i]
        qg, k, v = qkv_heads(h, positions, w, config)
        store(k, v, k_cache, v_cache, slot_mapping)
        q = qg.reshape(qg.shape[0], config.num_heads, config.head_dim)
        return output_projection(
            paged_attention(q, k_cache, v_cache, block_tables, context_lens, scale), w)
    return forward_layers(weights, weights.embed[token_ids], attend)
