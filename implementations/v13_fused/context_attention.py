"""A prefill's attention for every request of the pass in one launch, read straight from the
paged cache: v12 gathered each request's context K/V out of the cache (two copies a request) and
ran one attention call per request, in every layer, so a prefill of 30 prompts launched some 90
kernels a layer and the host spent more time issuing them than the GPU running them.

Here one program takes a few rows of one request with all the query heads of one KV head (as
v10's decode kernel takes a request's group: each K/V tile is loaded once for the group), and
walks the request's context slots (the cached prefix, then its own rows, in position order) tile
by tile with an online softmax. A request's rows are the last of its context, so row j of a
request with n rows and a context of c tokens sits at position c - n + j and sees keys
0 .. c - n + j: the causal mask aligned to the bottom right. Tiles past a program's last row's
position are never loaded.

A slice of a few hundred rows late in a long prompt (a prefill computed in slices) makes few
programs, each walking the whole context: there the context is split into chunks, one program
each, and v10's combine merges each row's partials in a second launch (flash-decoding, as v10's
decode).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from torchlet.contract import fake_of, kernel_op

from ..v12_prefix_cache import kernels, paged_kernels

check = kernels.check
# (row, query head) pairs a program holds: BLOCK_M // group rows of one request, each with the
# group of query heads that share one KV head (9 rows of 7 heads, 7 of 9: one pair idle, where
# padding the group to a power of 2, 7 to 8 or 9 to 16, would idle an eighth or nearly half).
BLOCK_M = 64
BLOCK_N = 64  # context tokens one loop iteration scores
COMBINE_SPLITS = 8  # partials the combine reads at once (it loops over more)
# Programs an SM when a pass's contexts are split (v10's plan): 2, the plan this kernel was
# measured with (docs/perf-notes.md); v10's decode kernel plans for 4.
PROGRAMS_PER_SM = 2
_NS = __name__.replace(".", "_")


# Specializing on these would compile a variant per divisibility as contexts grow, mid-serving.
@triton.jit(do_not_specialize=["splits", "chunk"])
def _context_attention_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, part_ptr, seen_ptr, rows_ptr, slots_ptr, contexts_ptr,
        scale, q_sn, q_sh, cache_sslot, cache_shead, out_sn, out_sh, kv_heads, group, head_dim,
        splits, chunk, ROWS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr, SPLIT: tl.constexpr, PRECISION: tl.constexpr):
    # A program holds ROWS x group (row, query head) pairs, the group's heads next to each other,
    # in a tile of BLOCK_M >= ROWS x group.
    first = tl.program_id(0) * ROWS
    r = tl.program_id(1)
    kv_head = tl.program_id(2) // splits
    split = tl.program_id(2) % splits
    row0 = tl.load(rows_ptr + r)
    rows = tl.load(rows_ptr + r + 1) - row0
    ctx0 = tl.load(contexts_ptr + r)
    context = tl.load(contexts_ptr + r + 1) - ctx0
    # Keys past the last live row's position are masked for every row: stop before them.
    end = tl.minimum(context, context - rows + first + ROWS)
    lo = split * chunk
    # The grid is planned for the longest request and context: programs past a request's rows,
    # or whose chunk starts past their last row's position, end here.
    if (first < rows) & (lo < end):
        i = tl.arange(0, BLOCK_M)
        g = i % group
        m = first + i // group
        d = tl.arange(0, BLOCK_D)
        live_m = (m < rows) & (i < ROWS * group)
        position = context - rows + m
        token = (row0 + m).to(tl.int64)
        head = kv_head * group + g
        q_mask = live_m[:, None] & (d < head_dim)[None, :]
        q = tl.load(q_ptr + token[:, None] * q_sn + head[:, None] * q_sh + d[None, :],
                    mask=q_mask, other=0.0)
        best = tl.full([BLOCK_M], float("-inf"), tl.float32)  # running max of the scores
        total = tl.zeros([BLOCK_M], tl.float32)                # running sum of exp(score - max)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        hi = tl.minimum(lo + chunk, end)  # unsplit, the chunk is the whole context: hi = end
        for start in range(lo, hi, BLOCK_N):
            n = start + tl.arange(0, BLOCK_N)
            live_n = n < hi
            slot = tl.load(slots_ptr + ctx0 + n, mask=live_n, other=0)
            at = slot.to(tl.int64) * cache_sslot + kv_head * cache_shead
            kv_mask = live_n[:, None] & (d < head_dim)[None, :]
            # Masked loads read 0 past the context: those slots may hold anything, NaN included.
            k = tl.load(k_ptr + at[:, None] + d[None, :], mask=kv_mask, other=0.0)
            scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
            scores = tl.where(live_n[None, :] & (n[None, :] <= position[:, None]), scores,
                              float("-inf"))
            new_best = tl.maximum(best, tl.max(scores, axis=1))
            # A row before `lo` (a chunk past its position) sees no key and keeps max -inf, and
            # -inf - -inf is NaN: measure from 0 there, so that its partial is empty, not NaN.
            ref = tl.where(new_best == float("-inf"), 0.0, new_best)
            p = tl.exp(scores - ref[:, None])
            rescale = tl.exp(best - ref)  # 0 on the first tile, where best is -inf
            total = total * rescale + tl.sum(p, axis=1)
            v = tl.load(v_ptr + at[:, None] + d[None, :], mask=kv_mask, other=0.0)
            acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            best = new_best
        if SPLIT:
            # v10's partial rows [group, head_dim + 2] = (acc | max | sum) per token, KV head and
            # chunk; and for the combine, how many keys each row sees, so that it reads only the
            # chunks that hold them (the first chunk's programs cover every row).
            width = head_dim + 2
            part = part_ptr + ((token * kv_heads + kv_head) * splits + split) * group * width \
                + g * width
            tl.store(part[:, None] + d[None, :], acc, mask=q_mask)
            tl.store(part + head_dim, best, mask=live_m)
            tl.store(part + head_dim + 1, total, mask=live_m)
            if split == 0:
                tl.store(seen_ptr + token, (position + 1).to(tl.int32), mask=live_m)
        else:
            out = acc / total[:, None]
            tl.store(out_ptr + token[:, None] * out_sn + head[:, None] * out_sh + d[None, :],
                     out.to(out_ptr.dtype.element_ty), mask=q_mask)


@kernel_op(f"{_NS}::context_attention")
def _context_attention_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                          row_indptr: torch.Tensor, context_slots: torch.Tensor,
                          context_indptr: torch.Tensor, max_context: int,
                          scale: float, fixed_chunk: int = 0) -> torch.Tensor:
    tokens, heads, head_dim = q.shape
    out = torch.empty_like(q)
    requests = row_indptr.shape[0] - 1
    if tokens == 0 or requests == 0:
        return out
    kv_heads = k_cache.shape[2]
    group = heads // kv_heads
    block_g, block_d = triton.next_power_of_2(group), paged_kernels._pad(head_dim)
    block_m = max(BLOCK_M, block_g)  # a group wider than the tile gets a program per row
    # The interpreter takes a dot of any size; the GPU needs tiles of 16 and more.
    assert min(block_m, BLOCK_N, block_d) >= paged_kernels.MIN_DOT, (block_m, BLOCK_N, block_d)
    rows_per_program = block_m // group
    # Shapes only, no device read: every request has at most min(tokens, max_context) rows, and
    # the live programs number about kv_heads x tokens / rows_per_program.
    if fixed_chunk:  # cut where v10's fixed plan cuts, whatever the rows (see context_attention)
        splits, chunk = paged_kernels._plan_fixed(max_context, fixed_chunk)
    else:
        splits, chunk = paged_kernels._plan_splits(
            kv_heads * triton.cdiv(tokens, rows_per_program), max_context,
            paged_kernels._num_sms(q.device), PROGRAMS_PER_SM)
    part = seen = out  # the SPLIT=False kernel writes neither
    if splits > 1:
        # torch.empty launches nothing: scratch for v10's partial rows, and each row's key count.
        part = torch.empty(tokens * kv_heads * splits * group * (head_dim + 2),
                           dtype=torch.float32, device=q.device)
        seen = torch.empty(tokens, dtype=torch.int32, device=q.device)
    grid = (triton.cdiv(min(tokens, max_context), rows_per_program), requests, kv_heads * splits)
    _context_attention_kernel[grid](
        q, k_cache, v_cache, out, part, seen, row_indptr, context_slots, context_indptr, scale,
        q.stride(0), q.stride(1), k_cache.stride(1), k_cache.stride(2), out.stride(0),
        out.stride(1), kv_heads, group, head_dim, splits, chunk,
        ROWS=rows_per_program, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_D=block_d, SPLIT=splits > 1,
        # float32 tl.dot defaults to TF32 on the GPU (10-bit mantissa); ask for full precision.
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32")
    if splits > 1:
        # v10's combine, a program per token and KV head, over [splits, group, head_dim] tiles
        # of partials where they fit.
        # One tile of splits whatever their count: a prefill runs outside a graph, and each new
        # BLOCK_S would compile in the middle of serving (0.3-1 s on the H200, docs/gpu.md).
        block_s = max(1, min(COMBINE_SPLITS, paged_kernels.COMBINE_FLOATS // (block_g * block_d)))
        paged_kernels._combine_kernel[(tokens, kv_heads)](
            part, seen, out, out.stride(0), out.stride(1), group, head_dim, chunk, splits,
            BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_S=block_s, PDL=False)
    return out


fake_of(_context_attention_op)(paged_kernels.shaped_like_q)


def context_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                      row_indptr: torch.Tensor, context_slots: torch.Tensor,
                      context_indptr: torch.Tensor, max_context: int,
                      scale: float, fixed_chunk: int = 0) -> torch.Tensor:
    """Ragged rows of several requests, q [T, heads, head_dim]: request r's rows are
    row_indptr[r] .. row_indptr[r + 1], and its context's slots (flat cache rows, block *
    block_size + offset, in position order) are context_slots[context_indptr[r] ..
    context_indptr[r + 1]]; its rows are the last of that context, which already holds their
    K/V. max_context (a host int) bounds every context length: with the row count it sizes the
    grid and decides whether to split the contexts over programs, so no host read is needed.
    Query head h reads KV head h // (heads / kv_heads). -> [T, heads, head_dim]. The indptrs
    and slots are not checked against each other or the cache on the device. fixed_chunk: as
    v10's paged_decode_attention takes it (0: split as the shape fills the GPU; else every
    context cut every that many tokens, so that a row's result does not depend on the rows
    beside it or on max_context)."""
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
    check(fixed_chunk >= 0, f"fixed_chunk must be 0 or a number of tokens, got {fixed_chunk}")
    return _context_attention_op(q, k_cache, v_cache, row_indptr, context_slots, context_indptr,
                                 int(max_context), float(scale), int(fixed_chunk))
