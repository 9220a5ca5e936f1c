"""Triton kernels for the paged KV cache: decode attention that follows the block table with an
online softmax (its context split across programs when the batch is too small to fill the GPU),
and the store that writes new K/V into the slots a step names.

Cache layout (shared with v08's PyTorch version): k_cache, v_cache [num_blocks, block_size,
num_kv_heads, head_dim]; token p of a request with table T lives in block T[p // block_size] at
offset p % block_size, i.e. flat slot T[p // block_size] * block_size + p % block_size. Physical
block 0 is the null block that padding entries of a table point to.

A caller that chains kernels launched dependent on one another (CUDA's programmatic dependent
launch, compute capability 9 and later) may launch the attention so too (`dependent`): its
programs then let the next launch start at once, load their first tile of the older tokens'
K/V, and wait for the launch before before they read its output: the queries and each row's
newest K/V.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from torchlet.contract import fake_of, kernel_op

from ..v09_triton_basics import kernels as v09_kernels

check = v09_kernels.check  # v09's input checks: one line error each

# tl.dot needs every tile dimension to be at least 16 on the GPU; smaller groups, head
# dims and pages are padded with masked rows rather than refused.
MIN_DOT = 16
# Context tokens one loop iteration scores: a tile may span several pages (or part of one).
# 128 measured faster than 64 at every batch and context tried on an H200 (in-graph, bf16, GQA
# 14:2: batch 64 x 4,096 went from 59 to 45 us, batch 256 x 1,024 from 47 to 38 us; 256 was
# slower at batch 256), docs/perf-notes.md.
BLOCK_N = 128
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_NS = __name__.replace(".", "_")


def _pad(n: int) -> int:
    return max(MIN_DOT, triton.next_power_of_2(n))


# --- decode attention ----------------------------------------------------------------------

# Split-K ("flash-decoding"): with one program per request x KV head, a small batch leaves most
# of the GPU idle (batch 1 with 2 KV heads runs 2 programs on 132 SMs). Below one such pair per
# SM, and for tables of at least MIN_SPLIT_CONTEXT tokens, each request's context is cut into
# chunks of whole BLOCK_N tiles, one program each, for about PROGRAMS_PER_SM programs per SM; a
# second launch (_combine_kernel) merges each pair's partials: no program reads what another of
# its launch writes. A one-launch version, whose last program to arrive merged through atomic
# counters, was dropped on 2026-12-01 after one wrong graph replay, whose cause was later found
# in the host's staging buffers (docs/gpu.md, runs 8 and 9); rebuilt on 2026-12-07 with a ticket
# a pair it gave the same bits, and on an H100 the same time at one row and 4-11% more at 64
# rows (docs/perf-notes.md, docs/probes/split_one_launch.patch): two launches stay.
# From one pair per SM up, splitting measured slower on an H200 (batch 32 x 8 KV heads, context
# 4096: 206 us split in 2 against 191 us unsplit): the partials and their combine cost more than
# the extra parallelism gains. 4 programs per SM, with the page size a compile-time constant,
# measured best of 12 variants (docs/probes/paged_decode_variants.py --quick, 2026-12-03): batch
# 64 x 4,096 42.9 us against 44.4 at 2 per SM, batch 64 x 1,024 14.0 against 15.0, the rest
# within 3%.
PROGRAMS_PER_SM = 4
# Below this a program walks at most 4 tiles: the split saves less than its second launch costs.
MIN_SPLIT_CONTEXT = 512
# The SM count the interpreter plans for (an H200's), so CPU runs take the GPU's split path.
DEFAULT_SMS = 132
# Most floats of partials the combine loads per step (128 registers a thread at 4 warps); the
# tile shrinks to the next power of 2 of the splits.
COMBINE_FLOATS = 16384


@triton.jit
def _tile_slots(tables_ptr, b, tables_sb, t, live, kv_head, cache_sblock, cache_stok,
                cache_shead, PAGE: tl.constexpr):
    """Where tokens t of request b's context keep their K/V for this KV head (offsets into the
    caches), following the block table: pages need not be adjacent. The page size is a
    compile-time constant, so t // PAGE and t % PAGE are a shift and a mask."""
    page = tl.load(tables_ptr + b * tables_sb + t // PAGE, mask=live, other=0)
    return page.to(tl.int64) * cache_sblock + (t % PAGE) * cache_stok + kv_head * cache_shead


@triton.jit
def _kv_tile(k_ptr, v_ptr, slot, d, tokens, on_d):
    """The keys [D, N] and values [N, D] of a tile's tokens where `tokens` holds, 0 elsewhere:
    masked loads read nothing past the context, whose slots may hold anything, NaN included."""
    k_t = tl.load(k_ptr + slot[None, :] + d[:, None], mask=tokens[None, :] & on_d[:, None],
                  other=0.0)
    v = tl.load(v_ptr + slot[:, None] + d[None, :], mask=tokens[:, None] & on_d[None, :],
                other=0.0)
    return k_t, v


@triton.jit
def _attend_tile(q, k_t, v, live, m, l, acc, scale, PRECISION: tl.constexpr):
    """The online softmax over one tile of keys k_t [D, N] and values v [N, D] (tokens not live
    masked out): -> the running max m, sum l and accumulator acc with the tile in."""
    scores = tl.dot(q, k_t, input_precision=PRECISION) * scale                        # [G, N]
    scores = tl.where(live[None, :], scores, float("-inf"))
    m_new = tl.maximum(m, tl.max(scores, axis=1))
    p = tl.exp(scores - m_new[:, None])
    rescale = tl.exp(m - m_new)  # 0 on the first tile, where m is -inf
    l = l * rescale + tl.sum(p, axis=1)
    acc = acc * rescale[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l, acc


@triton.jit
def _attend_heads(q_ptr, k_ptr, v_ptr, tables_ptr, b, kv_head, lo, hi, context, scale, q_sb,
                  q_sh, cache_sblock, cache_stok, cache_shead, tables_sb, group, head_dim,
                  PAGE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
                  BLOCK_N: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
    """The online softmax of request b's `group` query heads that share kv_head, over its tokens
    [lo, hi) of a context of `context`: -> (m, l, acc), the running max, sum and accumulator
    [BLOCK_G, BLOCK_D] of what a program of the decode kernel attends. PDL: launched dependent,
    it loads the first tile of the older tokens before its wait (paged_decode_attention)."""
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kv_head * group + g
    on_d = d < head_dim
    q_mask = (g < group)[:, None] & on_d[None, :]
    m = tl.full([BLOCK_G], float("-inf"), tl.float32)   # running max of the scores
    l = tl.zeros([BLOCK_G], tl.float32)                 # running sum of exp(score - m)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)      # running sum of exp(score - m) * v
    first = lo  # the first tile the loop below reads
    if PDL:
        # Before the wait, the first tile's K/V of every token but the newest: the launch before
        # stores that one, and no launch of the chain writes the older tokens, the lengths or
        # the tables, so this trip to memory overlaps the launch before.
        t = lo + tl.arange(0, BLOCK_N)
        live = t < hi
        older = live & (t < context - 1)
        slot = _tile_slots(tables_ptr, b, tables_sb, t, live, kv_head, cache_sblock, cache_stok,
                           cache_shead, PAGE)
        k_t, v = _kv_tile(k_ptr, v_ptr, slot, d, older, on_d)
        tl.extra.cuda.gdc_wait()
        # The newest token's K/V, now written, in its place: the tile a plain launch loads. One
        # row of each, not a tile masked to it: two tiles held at once spilled registers (ptxas
        # for sm_90a, docs/perf-notes.md). Its token as a vector, since a scalar mask does not
        # broadcast in the interpreter.
        newest = live & (t == context - 1)
        t_new = context - 1 + d * 0
        is_new = on_d & (t_new >= lo) & (t_new < tl.minimum(hi, lo + BLOCK_N))  # in this tile
        slot_new = _tile_slots(tables_ptr, b, tables_sb, t_new, is_new, kv_head, cache_sblock,
                               cache_stok, cache_shead, PAGE)
        k_new = tl.load(k_ptr + slot_new + d, mask=is_new, other=0.0)
        v_new = tl.load(v_ptr + slot_new + d, mask=is_new, other=0.0)
        k_t = tl.where(newest[None, :], k_new[:, None], k_t)
        v = tl.where(newest[:, None], v_new[None, :], v)
    q = tl.load(q_ptr + b * q_sb + heads[:, None] * q_sh + d[None, :], mask=q_mask, other=0.0)
    if PDL:
        if lo < hi:
            m, l, acc = _attend_tile(q, k_t, v, live, m, l, acc, scale, PRECISION)
        first = lo + BLOCK_N
    for start in range(first, hi, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)
        live = t < hi
        slot = _tile_slots(tables_ptr, b, tables_sb, t, live, kv_head, cache_sblock, cache_stok,
                           cache_shead, PAGE)
        k_t, v = _kv_tile(k_ptr, v_ptr, slot, d, live, on_d)
        m, l, acc = _attend_tile(q, k_t, v, live, m, l, acc, scale, PRECISION)
    return m, l, acc


@triton.jit
def write_heads(out_ptr, b, out_sb, out_sh, heads, d, mask, acc, l):
    """Request b's heads' output [BLOCK_G, BLOCK_D] from the online softmax's sum l and
    accumulator acc, in out's dtype, at out[b, heads, d] (strides out_sb, out_sh). A context of
    0 (a padding row of a fixed-size batch) leaves l = 0: zeros are written, not NaN."""
    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    tl.store(out_ptr + b * out_sb + heads[:, None] * out_sh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _paged_decode_kernel(
        q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, out_ptr, part_ptr, scale,
        q_sb, q_sh, cache_sblock, cache_stok, cache_shead, tables_sb, out_sb, out_sh,
        kv_heads, group, head_dim, chunk, PAGE: tl.constexpr,
        BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
        SPLIT: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
    # One program = one request x one KV head (x one chunk of its context when SPLIT), with all
    # `group` query heads that share it: each K/V tile is read from memory once and used for the
    # whole group. A request's KV heads are adjacent programs (axis 0 = b * kv_heads + kv_head),
    # which a GPU starts together: each reads its head's part of the same token rows at about
    # the same time (in the cache a token's heads are one row).
    if PDL:  # launched dependent (paged_decode_attention's `dependent`)
        tl.extra.cuda.gdc_launch_dependents()
    pair = tl.program_id(0)
    b = (pair // kv_heads).to(tl.int64)
    kv_head = pair % kv_heads
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    heads = kv_head * group + g
    q_mask = (g < group)[:, None] & (d < head_dim)[None, :]

    context = tl.load(lens_ptr + b)
    if SPLIT:
        # A chunk that starts at or past the context runs no tile: m = -inf, l = 0, acc = 0.
        lo = tl.program_id(1) * chunk
        hi = tl.minimum(lo + chunk, context)
    else:
        lo = 0
        hi = context
    m, l, acc = _attend_heads(q_ptr, k_ptr, v_ptr, tables_ptr, b, kv_head, lo, hi, context,
                              scale, q_sb, q_sh, cache_sblock, cache_stok, cache_shead,
                              tables_sb, group, head_dim, PAGE, BLOCK_G, BLOCK_D, BLOCK_N,
                              PRECISION, PDL)

    if SPLIT:
        # The chunk's partial goes to scratch rows [group, head_dim + 2] = (acc | m | l), one
        # per split; _combine_kernel, the next launch, merges them. A chunk at or past the
        # context writes nothing: the combine reads only the splits that hold tokens.
        row = head_dim + 2
        part = (part_ptr + ((b * kv_heads + kv_head) * tl.num_programs(1) + tl.program_id(1))
                * group * row + g * row)
        if lo < context:
            tl.store(part[:, None] + d[None, :], acc, mask=q_mask)
            tl.store(part + head_dim, m, mask=g < group)
            tl.store(part + head_dim + 1, l, mask=g < group)
    else:
        write_heads(out_ptr, b, out_sb, out_sh, heads, d, q_mask, acc, l)


@triton.jit(do_not_specialize=["splits"])  # a split count divisible by 16 is no new kernel
def _combine_kernel(part_ptr, lens_ptr, out_ptr, out_sb, out_sh, group, head_dim, chunk,
                    splits, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
                    BLOCK_S: tl.constexpr, PDL: tl.constexpr):
    # One program = one request x one KV head: the online softmax again, over its chunks'
    # partials (each a max m, a sum l and an accumulator) instead of over tokens.
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    b = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    s = tl.arange(0, BLOCK_S)
    row = head_dim + 2
    mine = part_ptr + (b * tl.num_programs(1) + kv_head) * splits * group * row
    live_splits = tl.minimum(tl.cdiv(tl.load(lens_ptr + b), chunk), splits)
    big_m = tl.full([BLOCK_G], float("-inf"), tl.float32)
    big_l = tl.zeros([BLOCK_G], tl.float32)
    big_acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for first in range(0, live_splits, BLOCK_S):
        rows = mine + (first + s)[:, None] * (group * row) + g[None, :] * row          # [S, G]
        ml_mask = ((first + s) < live_splits)[:, None] & (g < group)[None, :]
        m_s = tl.load(rows + head_dim, mask=ml_mask, other=float("-inf"))
        l_s = tl.load(rows + head_dim + 1, mask=ml_mask, other=0.0)
        acc_s = tl.load(rows[:, :, None] + d[None, None, :],
                        mask=ml_mask[:, :, None] & (d < head_dim)[None, None, :], other=0.0)
        m_new = tl.maximum(big_m, tl.max(m_s, axis=0))
        # A group row with no tokens yet keeps max -inf, and -inf - -inf is NaN: measure from 0
        # there, so that empty partials weigh exp(-inf) = 0.
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        w = tl.exp(m_s - m_ref[None, :])                                               # [S, G]
        rescale = tl.exp(big_m - m_ref)
        big_l = big_l * rescale + tl.sum(w * l_s, axis=0)
        big_acc = big_acc * rescale[:, None] + tl.sum(w[:, :, None] * acc_s, axis=0)
        big_m = m_new
    heads = kv_head * group + g
    q_mask = (g < group)[:, None] & (d < head_dim)[None, :]
    # A context of 0 leaves every split empty, so l = 0: write zeros, not NaN.
    out = big_acc / tl.where(big_l > 0, big_l, 1.0)[:, None]
    tl.store(out_ptr + b * out_sb + heads[:, None] * out_sh + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=q_mask)


_SMS: dict[torch.device, int] = {}


def _num_sms(device: torch.device) -> int:
    if device.type != "cuda":
        return DEFAULT_SMS
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device]


def _plan_splits(work: int, max_context: int, sms: int,
                 per_sm: int | None = None) -> tuple[int, int]:
    """(splits, chunk tokens) for `work` request x KV head pairs whose tables hold max_context
    tokens, for about per_sm (PROGRAMS_PER_SM) programs an SM. Only shapes go in, never
    context_lens, so a captured graph's launch fits every replay; chunks are whole tiles, and
    none lies wholly past max_context."""
    tiles = triton.cdiv(max_context, BLOCK_N)
    if work >= sms or max_context < MIN_SPLIT_CONTEXT:
        return 1, max_context
    per_sm = PROGRAMS_PER_SM if per_sm is None else per_sm
    splits = max(1, min(triton.cdiv(per_sm * sms, work), tiles))
    if splits == 1:
        return 1, max_context
    chunk = triton.cdiv(tiles, splits) * BLOCK_N
    return triton.cdiv(max_context, chunk), chunk


def _plan_fixed(max_context: int, chunk: int) -> tuple[int, int]:
    """(splits, chunk tokens) where every context is cut at the same places, chunk tokens
    (whole tiles) apart, whatever the batch: a row's sums then do not depend on the rows beside
    it (the combine's tile is fixed too, see _paged_decode_op)."""
    chunk = triton.cdiv(chunk, BLOCK_N) * BLOCK_N
    return max(1, triton.cdiv(max_context, chunk)), chunk


def decode_plan(q: torch.Tensor, k_cache: torch.Tensor, block_tables: torch.Tensor,
                fixed_chunk: int = 0) -> tuple[int, int]:
    """(splits, chunk tokens) of paged_decode_attention's launch for these shapes: its kernel
    alone where splits is 1, then the combine's launch."""
    max_context = block_tables.shape[1] * k_cache.shape[1]
    if fixed_chunk:
        return _plan_fixed(max_context, fixed_chunk)
    return _plan_splits(q.shape[0] * k_cache.shape[2], max_context, _num_sms(q.device))


def dependent_launch(dependent: bool) -> dict:
    """A kernel's PDL flag (its programs call gdc_launch_dependents and gdc_wait) and Triton's
    launch option (launch_pdl), set together: launched dependent, a kernel that did not wait
    would read its input before the launch that writes it ends."""
    return {"PDL": True, "launch_pdl": True} if dependent else {"PDL": False}


@kernel_op(f"{_NS}::paged_decode_attention")
def _paged_decode_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     block_tables: torch.Tensor, context_lens: torch.Tensor,
                     scale: float, fixed_chunk: int = 0, dependent: bool = False
                     ) -> torch.Tensor:
    batch, heads, head_dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    out = torch.empty_like(q)
    if batch == 0:
        return out
    group = heads // kv_heads
    block_g, block_d = _pad(group), _pad(head_dim)
    # The combine's [S, G, D] tile of partials: all the splits at once where they fit; with a
    # fixed chunk, the most that fit, so the tile (and the order of its sums) is the same for
    # every batch and table width.
    block_s = max(1, COMBINE_FLOATS // (block_g * block_d))
    splits, chunk = decode_plan(q, k_cache, block_tables, fixed_chunk)
    if not fixed_chunk:
        block_s = min(triton.next_power_of_2(splits), block_s)
    launch = dependent_launch(dependent)
    part = out  # the SPLIT=False kernel writes no partials
    if splits > 1:
        # torch.empty launches nothing and is capture-safe: a graph keeps its own scratch.
        part = torch.empty(batch * kv_heads * splits * group * (head_dim + 2),
                           dtype=torch.float32, device=q.device)
    _paged_decode_kernel[(batch * kv_heads, splits)](
        q, k_cache, v_cache, block_tables, context_lens, out, part, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        kv_heads, group, head_dim, chunk, PAGE=block_size,
        BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_N=BLOCK_N, SPLIT=splits > 1,
        # float32 tl.dot defaults to TF32 on the GPU (10-bit mantissa); ask for full precision.
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", **launch)
    if splits > 1:
        _combine_kernel[(batch, kv_heads)](
            part, context_lens, out, out.stride(0), out.stride(1), group, head_dim, chunk,
            splits, BLOCK_G=block_g, BLOCK_D=block_d, BLOCK_S=block_s, **launch)
    return out


def shaped_like_q(q, *_):
    """What an attention op over q [rows, heads, head_dim] promises: a tensor like q."""
    return torch.empty_like(q)


fake_of(_paged_decode_op)(shaped_like_q)


def check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, dtype, device) -> None:
    check(k_cache.dim() == 4 and k_cache.shape == v_cache.shape,
          f"k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} must both be "
          f"[num_blocks, block_size, num_kv_heads, head_dim]")
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        check(c.is_contiguous(), f"{name} must be contiguous")
        check(c.dtype == dtype, f"{name} is {c.dtype} but the new K/V or q is {dtype}")
        check(c.device == device, f"{name} is on {c.device}, the inputs on {device}")


def check_queries(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  rows: str) -> None:
    """q [rows, heads, head_dim] against the paged caches it attends over: dtypes, devices,
    layouts, head_dim, and query heads that share the KV heads evenly."""
    check(q.dtype in DTYPES, f"q must be float32, float16 or bfloat16, got {q.dtype}")
    check(q.dim() == 3 and q.stride(-1) == 1,
          f"q must be [{rows}, heads, head_dim] with a contiguous last dimension, got shape "
          f"{tuple(q.shape)} strides {q.stride()}")
    check_cache(k_cache, v_cache, q.dtype, q.device)
    heads, head_dim, kv_heads = q.shape[1], q.shape[2], k_cache.shape[2]
    check(k_cache.shape[3] == head_dim,
          f"cache head_dim {k_cache.shape[3]} differs from q's {head_dim}")
    check(heads % kv_heads == 0,
          f"{heads} query heads cannot share {kv_heads} KV heads evenly (GQA needs a multiple)")


def paged_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float, fixed_chunk: int = 0,
                           dependent: bool = False) -> torch.Tensor:
    """One new token per request: q [B, heads, head_dim] attends over the first context_lens[b]
    tokens that block_tables [B, max_blocks] (int32, padded with the null block 0) names.
    Query head h reads KV head h // (heads / kv_heads). -> [B, heads, head_dim]; a row with
    context 0 gives zeros. fixed_chunk: 0 splits contexts as the batch's shape fills the GPU
    best (_plan_splits); a number of tokens cuts every context every that many tokens (rounded
    up to whole tiles), so a row's result is the same bits in any batch. dependent: launch
    both kernels dependent on the launch before (CUDA's programmatic dependent launch, compute
    capability 9 and later: the caller's to know): each program lets the launch after it start,
    loads the lengths, its table entries and its first tile of K/V but the newest token's, then
    waits for the writes of the launch before it and reads q and the newest K/V, so in a chain
    of kernels launched so the next one's programs start while these end, and the tile's trip
    to memory overlaps the launch before. That launch may write q and each row's newest K/V
    (a decode step's q/k/v launch), nothing else the attention reads: the caller's promise."""
    check_decode(q, k_cache, v_cache, block_tables, context_lens, fixed_chunk)
    return _paged_decode_op(q, k_cache, v_cache, block_tables, context_lens, float(scale),
                            int(fixed_chunk), bool(dependent))


def check_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 block_tables: torch.Tensor, context_lens: torch.Tensor,
                 fixed_chunk: int = 0) -> None:
    """paged_decode_attention's inputs, each fault a one-line error."""
    check_queries(q, k_cache, v_cache, "B")
    batch = q.shape[0]
    for name, t in (("block_tables", block_tables), ("context_lens", context_lens)):
        check(t.dtype == torch.int32, f"{name} must be int32, got {t.dtype}")
        check(t.device == q.device, f"{name} is on {t.device}, q on {q.device}")
    check(block_tables.dim() == 2 and block_tables.shape[0] == batch
          and block_tables.stride(1) == 1,
          f"block_tables must be [B={batch}, max_blocks] with contiguous rows, got "
          f"{tuple(block_tables.shape)}")
    check(context_lens.shape == (batch,) and context_lens.is_contiguous(),
          f"context_lens must be a contiguous [B={batch}], got {tuple(context_lens.shape)}")
    check(fixed_chunk >= 0, f"fixed_chunk must be 0 or a number of tokens, got {fixed_chunk}")


# --- store ---------------------------------------------------------------------------------

@triton.jit
def _store_kv_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slots_ptr,
                     k_sn, k_sh, v_sn, v_sh, block_size, cache_sblock, cache_stok, cache_shead,
                     kv_heads, head_dim, BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    i = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    # The token's slot, read once per head row: a scalar mask does not broadcast in the
    # interpreter. Slot -1 (a padding token) masks every lane off: nothing is read or written.
    slot = tl.load(slots_ptr + i + h * 0)[:, None]
    mask = (slot >= 0) & (h < kv_heads)[:, None] & (d < head_dim)[None, :]
    dst = (slot // block_size) * cache_sblock + (slot % block_size) * cache_stok \
        + h[:, None] * cache_shead + d[None, :]
    k = tl.load(k_ptr + i * k_sn + h[:, None] * k_sh + d[None, :], mask=mask)
    v = tl.load(v_ptr + i * v_sn + h[:, None] * v_sh + d[None, :], mask=mask)
    tl.store(k_cache_ptr + dst, k, mask=mask)
    tl.store(v_cache_ptr + dst, v, mask=mask)


@kernel_op(f"{_NS}::store_kv", ("k_cache", "v_cache"))
def _store_kv_op(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                 slot_mapping: torch.Tensor) -> None:
    tokens, kv_heads, head_dim = k.shape
    if tokens == 0:
        return
    _store_kv_kernel[(tokens,)](
        k, v, k_cache, v_cache, slot_mapping, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.shape[1], k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        kv_heads, head_dim,
        BLOCK_H=triton.next_power_of_2(kv_heads), BLOCK_D=triton.next_power_of_2(head_dim))


def store_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
             slot_mapping: torch.Tensor) -> None:
    """Write k, v [N, kv_heads, head_dim] into the caches: token i goes to flat slot
    slot_mapping[i] (int64, = block * block_size + offset); -1 writes nothing. Slots must lie
    inside the cache: the kernel does not check them, so that no host sync breaks a graph."""
    check(k.dtype in DTYPES, f"k must be float32, float16 or bfloat16, got {k.dtype}")
    check(k.dim() == 3 and k.shape == v.shape and v.dtype == k.dtype,
          f"k {tuple(k.shape)} {k.dtype} and v {tuple(v.shape)} {v.dtype} must both be "
          f"[N, kv_heads, head_dim] of one dtype")
    check(k.stride(-1) == 1 and v.stride(-1) == 1, "k and v need a contiguous last dimension")
    check_cache(k_cache, v_cache, k.dtype, k.device)
    check(k_cache.shape[2:] == k.shape[1:],
          f"cache heads x head_dim {tuple(k_cache.shape[2:])} differ from k's {tuple(k.shape[1:])}")
    check(slot_mapping.dtype == torch.int64 and slot_mapping.shape == (k.shape[0],)
          and slot_mapping.is_contiguous() and slot_mapping.device == k.device,
          f"slot_mapping must be a contiguous int64 [N={k.shape[0]}] on {k.device}, got "
          f"{slot_mapping.dtype} {tuple(slot_mapping.shape)} on {slot_mapping.device}")
    _store_kv_op(k, v, k_cache, v_cache, slot_mapping)
