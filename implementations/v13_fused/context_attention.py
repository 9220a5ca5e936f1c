"""A prefill's attention for every request of the pass in one launch, read straight from the
paged cache: v12 gathered each request's context K/V out of the cache (two copies a request) and
ran one attention call per request, in every layer, so a prefill of 30 prompts launched some 90
kernels a layer and the host spent more time issuing them than the GPU running them.

Here one program takes BLOCK_M rows of one request for one query head, and walks the request's
context slots (the cached prefix, then its own rows, in position order) tile by tile with an
online softmax, as v10's decode kernel walks a block table. A request's rows are the last of its
context, so row j of a request with n rows and a context of c tokens sits at position c - n + j
and sees keys 0 .. c - n + j: the causal mask aligned to the bottom right. Tiles past a program's
last row's position are never loaded.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..v12_prefix_cache import kernels, paged_kernels

check = kernels.check
BLOCK_M = 64  # query rows a program holds
BLOCK_N = 64  # context tokens one loop iteration scores
_NS = __name__.replace(".", "_")


@triton.jit
def _context_attention_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, rows_ptr, slots_ptr, contexts_ptr, scale,
        q_sn, q_sh, cache_sslot, cache_shead, out_sn, out_sh, group, head_dim,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        PRECISION: tl.constexpr):
    r = tl.program_id(0)
    first = tl.program_id(1) * BLOCK_M
    head = tl.program_id(2)
    row0 = tl.load(rows_ptr + r)
    rows = tl.load(rows_ptr + r + 1) - row0
    ctx0 = tl.load(contexts_ptr + r)
    context = tl.load(contexts_ptr + r + 1) - ctx0
    if first < rows:  # the grid is planned for the longest context; shorter requests end here
        m = first + tl.arange(0, BLOCK_M)
        d = tl.arange(0, BLOCK_D)
        live_m = m < rows
        position = context - rows + m
        q_mask = live_m[:, None] & (d < head_dim)[None, :]
        q = tl.load(q_ptr + (row0 + m).to(tl.int64)[:, None] * q_sn + head * q_sh + d[None, :],
                    mask=q_mask, other=0.0)
        kv_head = head // group
        best = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max of the scores
        total = tl.zeros([BLOCK_M], tl.float32)                # running sum of exp(score - max)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        # Keys past the last live row's position are masked for every row: stop before them.
        end = tl.minimum(context, context - rows + first + BLOCK_M)
        for start in range(0, end, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            live_n = n < end
            slot = tl.load(slots_ptr + ctx0 + n, mask=live_n, other=0)
            at = slot.to(tl.int64) * cache_sslot + kv_head * cache_shead
            kv_mask = live_n[:, None] & (d < head_dim)[None, :]
            # Masked loads read 0 past the context: those slots may hold anything, NaN included.
            k = tl.load(k_ptr + at[:, None] + d[None, :], mask=kv_mask, other=0.0)
            scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
            scores = tl.where(live_n[None, :] & (n[None, :] <= position[:, None]), scores,
                              float("-inf"))
            # Key 0 is in the first tile and every row sees it, so the max is finite from there.
            new_best = tl.maximum(best, tl.max(scores, axis=1))
            p = tl.exp(scores - new_best[:, None])
            rescale = tl.exp(best - new_best)  # 0 on the first tile, where best is -inf
            total = total * rescale + tl.sum(p, axis=1)
            v = tl.load(v_ptr + at[:, None] + d[None, :], mask=kv_mask, other=0.0)
            acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            best = new_best
        out = acc / total[:, None]
        tl.store(out_ptr + (row0 + m).to(tl.int64)[:, None] * out_sn + head * out_sh + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=q_mask)


@torch.library.custom_op(f"{_NS}::context_attention", mutates_args=())
def _context_attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          row_indptr: torch.Tensor, context_slots: torch.Tensor,
                          context_indptr: torch.Tensor, max_context: int,
                          scale: float) -> torch.Tensor:
    tokens, heads, head_dim = q.shape
    out = torch.empty_like(q)
    requests = row_indptr.shape[0] - 1
    if tokens == 0 or requests == 0:
        return out
    kv_heads = k_cache.shape[2]
    _context_attention_kernel[(requests, triton.cdiv(max_context, BLOCK_M), heads)](
        q, k_cache, v_cache, out, row_indptr, context_slots, context_indptr, scale,
        q.stride(0), q.stride(1), k_cache.stride(1), k_cache.stride(2), out.stride(0),
        out.stride(1), heads // kv_heads, head_dim,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=paged_kernels._pad(head_dim),
        # float32 tl.dot defaults to TF32 on the GPU (10-bit mantissa); ask for full precision.
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
    return out


_context_attention_op.register_fake(paged_kernels.shaped_like_q)


def context_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      row_indptr: torch.Tensor, context_slots: torch.Tensor,
                      context_indptr: torch.Tensor, max_context: int,
                      scale: float) -> torch.Tensor:
    """Ragged rows of several requests, q [T, heads, head_dim]: request r's rows are
    row_indptr[r] .. row_indptr[r + 1], and its context's slots (flat cache rows, block *
    block_size + offset, in position order) are context_slots[context_indptr[r] ..
    context_indptr[r + 1]]; its rows are the last of that context, which already holds their
    K/V. max_context (a host int) bounds every context length: it sizes the grid, so no host
    read is needed. Query head h reads KV head h // (heads / kv_heads). -> [T, heads, head_dim].
    The indptrs and slots are not checked against each other or the cache on the device."""
    paged_kernels.check_queries(q, k_cache, v_cache, "tokens")
    for name, t in (("row_indptr", row_indptr), ("context_slots", context_slots),
                    ("context_indptr", context_indptr)):
        check(t.dtype == torch.int64 and t.dim() == 1 and t.is_contiguous()
              and t.device == q.device,
              f"{name} must be a contiguous 1-D int64 on {q.device}, got {t.dtype} "
              f"{tuple(t.shape)} on {t.device}")
    check(row_indptr.shape == context_indptr.shape and row_indptr.shape[0] >= 1,
          f"row_indptr {tuple(row_indptr.shape)} and context_indptr "
          f"{tuple(context_indptr.shape)} must both be [requests + 1]")
    check(max_context >= 0, f"max_context must be >= 0, got {max_context}")
    return _context_attention_op(q, k_cache, v_cache, row_indptr, context_slots, context_indptr,
                                 int(max_context), float(scale))
