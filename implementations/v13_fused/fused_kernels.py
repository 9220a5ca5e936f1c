"""Triton kernels over the fused projections' outputs. Both read one row of a packed GEMM output
and do what v09 did with its pieces after three (or two) GEMMs:

- rope_split: a row of qkv = [q heads | k heads | v heads] (the output of the one q/k/v GEMM)
  becomes q and k rotated at the row's position and v copied, each contiguous: one kernel where
  v09 ran one for q and one for k, and the heads needed no split since each GEMM wrote its own.
  For Qwen3 it first RMS-norms each q and k head (q_norm, k_norm), as v09's rms_norm kernel did
  on the heads in a launch of its own for each: a head's values are all in the program already.
- swiglu_packed: a row of gate_up = [gate | up] becomes silu(gate) * up, as v09's swiglu.

And one kernel pair over the LM head's output: argmax_rows, the greedy draw's argmax in one read
of the logits, where torch's reduction over a 151,936-wide row takes about twice as long (54 us
against 31 at 256 rows on an H100, docs/perf-notes.md).

Same arithmetic as v09's kernels (float32 inside, the model dtype at the same rounding points), so
the tokens equal v12's. Checks and custom ops as in v09 (kernels.py): one op per launch.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from torchlet.contract import fake_of, kernel_op

from ..v12_prefix_cache import kernels, paged_kernels

ELEMENTWISE_BLOCK, check = kernels.ELEMENTWISE_BLOCK, kernels.check
check_tensor = kernels.check_tensor

_NS = __name__.replace(".", "_")


# --- RoPE and the head split ---------------------------------------------------------------

@triton.jit
def _rope_split_kernel(qkv_ptr, cos_ptr, sin_ptr, q_norm_ptr, k_norm_ptr, q_ptr, k_ptr, v_ptr,
                       k_cache_ptr, v_cache_ptr, slots_ptr, block_size, cache_sblock, cache_stok,
                       cache_shead, tokens, n_q, n_kv, half, eps, HAS_NORM: tl.constexpr,
                       STORE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_HALF: tl.constexpr):
    # One program = BLOCK_R rows of qkv's heads, every token's q, k and v heads one after
    # another: a row is one head of one token.
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    n_heads = n_q + 2 * n_kv
    token = (rows // n_heads)[:, None]
    heads = rows % n_heads  # over q, then k, then v heads
    cols = tl.arange(0, BLOCK_HALF)
    col_mask = cols < half
    width = 2 * half
    mask = (rows < tokens * n_heads)[:, None] & col_mask[None, :]
    src = rows[:, None] * width + cols[None, :]
    x1 = tl.load(qkv_ptr + src, mask=mask, other=0.0)
    x2 = tl.load(qkv_ptr + src + half, mask=mask, other=0.0)
    if HAS_NORM:
        # Each q and k head RMS-normed over its 2 * half values before it turns, rounded where
        # v09's rms_norm rounds: the normed value in the model dtype, then times the weight.
        a, b = x1.to(tl.float32), x2.to(tl.float32)
        inv = tl.rsqrt((tl.sum(a * a, axis=1) + tl.sum(b * b, axis=1)) / width + eps)[:, None]
        of_q = (heads < n_q)[:, None]
        turned = (heads < n_q + n_kv)[:, None]  # q and k heads are normed; v heads are not
        w1 = tl.where(of_q, tl.load(q_norm_ptr + cols, mask=col_mask, other=0.0)[None, :],
                      tl.load(k_norm_ptr + cols, mask=col_mask, other=0.0)[None, :])
        w2 = tl.where(of_q, tl.load(q_norm_ptr + half + cols, mask=col_mask, other=0.0)[None, :],
                      tl.load(k_norm_ptr + half + cols, mask=col_mask, other=0.0)[None, :])
        x1 = tl.where(turned, w1 * (a * inv).to(x1.dtype), x1)
        x2 = tl.where(turned, w2 * (b * inv).to(x2.dtype), x2)
    turn_and_store(x1, x2, heads[:, None], cols[None, :], mask, token, cos_ptr, sin_ptr, q_ptr,
                   k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slots_ptr, block_size, cache_sblock,
                   cache_stok, cache_shead, n_q, n_kv, half, STORE)


@triton.jit
def turn_and_store(x1, x2, head, c, live, token, cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr,
                   k_cache_ptr, v_cache_ptr, slots_ptr, block_size, cache_sblock, cache_stok,
                   cache_shead, n_q, n_kv, half, STORE: tl.constexpr):
    """The values at columns c and c + half of head `head` of the token's [q | k | v] row (x1,
    x2 in the model dtype; head, c, live and token of one shape, a tile or pairs, or token one
    number): q and k heads turned by the token's angle of column c, v heads copied, each
    written to q, k or v, and with STORE k and v into the token's cache slot too, as v10's
    store_kv writes them (slot -1, a padding row, writes nothing). rope_split's epilogue, and
    the q/k/v gemv's."""
    a, b = x1.to(tl.float32), x2.to(tl.float32)
    cos = tl.load(cos_ptr + token * half + c, mask=live, other=0.0)
    sin = tl.load(sin_ptr + token * half + c, mask=live, other=0.0)
    turned = head < n_q + n_kv  # q and k heads turn; v heads are copied as they are
    out1 = tl.where(turned, (a * cos - b * sin).to(x1.dtype), x1)
    out2 = tl.where(turned, (b * cos + a * sin).to(x1.dtype), x2)
    width = 2 * half
    is_q = live & (head < n_q)
    is_k = live & (head >= n_q) & turned
    is_v = live & ~turned
    q_off = token * n_q * width + head * width + c
    kv_head = tl.where(turned, head - n_q, head - n_q - n_kv)
    kv_off = token * n_kv * width + kv_head * width + c
    tl.store(q_ptr + q_off, out1, mask=is_q)
    tl.store(q_ptr + q_off + half, out2, mask=is_q)
    tl.store(k_ptr + kv_off, out1, mask=is_k)
    tl.store(k_ptr + kv_off + half, out2, mask=is_k)
    tl.store(v_ptr + kv_off, out1, mask=is_v)
    tl.store(v_ptr + kv_off + half, out2, mask=is_v)
    if STORE:
        # The slot read for each head and column (a scalar mask does not broadcast in the
        # interpreter), none for a row past the last token.
        slot = tl.load(slots_ptr + token + head * 0 + c * 0, mask=live, other=-1)
        dst = ((slot // block_size) * cache_sblock + (slot % block_size) * cache_stok
               + kv_head * cache_shead + c)
        tl.store(k_cache_ptr + dst, out1, mask=is_k & (slot >= 0))
        tl.store(k_cache_ptr + dst + half, out2, mask=is_k & (slot >= 0))
        tl.store(v_cache_ptr + dst, out1, mask=is_v & (slot >= 0))
        tl.store(v_cache_ptr + dst + half, out2, mask=is_v & (slot >= 0))


def _rope_split(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_q: int, n_kv: int,
                q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float,
                store: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None):
    tokens = qkv.shape[0]
    head_dim = qkv.shape[1] // (n_q + 2 * n_kv)
    q = qkv.new_empty(tokens, n_q, head_dim)
    k = qkv.new_empty(tokens, n_kv, head_dim)
    v = qkv.new_empty(tokens, n_kv, head_dim)
    if tokens == 0:
        return q, k, v
    rows = tokens * (n_q + 2 * n_kv)
    block_r = kernels.head_rows(rows, qkv.is_cuda)  # v09's rotate's plan
    has_norm = q_norm is not None
    # Without a store, the cache pointers are any tensors and its layout numbers unused.
    k_cache, v_cache, slots = store if store is not None else (k, v, qkv)
    layout = (k_cache.shape[1], *k_cache.stride()[:3]) if store is not None else (1, 0, 0, 0)
    _rope_split_kernel[(triton.cdiv(rows, block_r),)](
        qkv, cos, sin, q_norm if has_norm else qkv, k_norm if has_norm else qkv, q, k, v,
        k_cache, v_cache, slots, *layout, tokens, n_q, n_kv, head_dim // 2, eps,
        HAS_NORM=has_norm, STORE=store is not None,
        BLOCK_R=block_r, BLOCK_HALF=triton.next_power_of_2(head_dim // 2))
    return q, k, v


@kernel_op(f"{_NS}::rope_split")
def _rope_split_op(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_q: int, n_kv: int,
                   q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _rope_split(qkv, cos, sin, n_q, n_kv, q_norm, k_norm, eps)


@kernel_op(f"{_NS}::rope_split_store", ("k_cache", "v_cache"))
def _rope_split_store_op(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_q: int,
                         n_kv: int, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None,
                         eps: float, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         slot_mapping: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _rope_split(qkv, cos, sin, n_q, n_kv, q_norm, k_norm, eps,
                       (k_cache, v_cache, slot_mapping))


def _heads_like(qkv, cos, sin, n_q, n_kv, *_):
    head_dim = qkv.shape[1] // (n_q + 2 * n_kv)
    return (qkv.new_empty(qkv.shape[0], n_q, head_dim), qkv.new_empty(qkv.shape[0], n_kv, head_dim),
            qkv.new_empty(qkv.shape[0], n_kv, head_dim))


fake_of(_rope_split_op)(_heads_like)
fake_of(_rope_split_store_op)(_heads_like)


def rope_split(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, n_q: int, n_kv: int,
               q_norm: torch.Tensor | None = None, k_norm: torch.Tensor | None = None,
               eps: float = 1e-6, store: tuple[torch.Tensor, ...] | None = None):
    """qkv [tokens, (n_q + 2 n_kv) * head_dim] -> q [tokens, n_q, head_dim] and k [tokens, n_kv,
    head_dim] turned by the angles whose cos and sin [tokens, head_dim / 2] (float32) v09's
    rope_cos_sin gives, and v [tokens, n_kv, head_dim] as it is. With q_norm and k_norm
    ([head_dim] each, Qwen3's), each q and k head is RMS-normed (eps) before it turns. With
    store = (k_cache, v_cache, slot_mapping), each token's k and v are also written into the
    paged caches at its slot, as v10's store_kv(k, v, k_cache, v_cache, slot_mapping) writes
    them (-1 writes nothing), by the same launch."""
    check_tensor("qkv", qkv)
    check(qkv.dim() == 2, f"qkv must be [tokens, columns], got shape {tuple(qkv.shape)}")
    check_split(qkv.shape[0], qkv.shape[1], qkv, cos, sin, n_q, n_kv, store)
    head_dim = qkv.shape[1] // (n_q + 2 * n_kv)
    check((q_norm is None) == (k_norm is None), "q_norm and k_norm go together")
    for name, t in (("q_norm", q_norm), ("k_norm", k_norm)):
        if t is not None:
            check_tensor(name, t, like=qkv)
            check(t.shape == (head_dim,), f"{name} must be [head_dim={head_dim}], got "
                                          f"{tuple(t.shape)}")
    if store is None:
        return _rope_split_op(qkv, cos, sin, int(n_q), int(n_kv), q_norm, k_norm, float(eps))
    return _rope_split_store_op(qkv, cos, sin, int(n_q), int(n_kv), q_norm, k_norm, float(eps),
                                *store)


def check_split(tokens: int, columns: int, like: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor, n_q: int, n_kv: int, store: tuple | None) -> None:
    """rope_split's checks of a row of `columns` [q heads | k heads | v heads] for each of
    `tokens` (on like's device, of its dtype), their angles and the store: one line each."""
    check(n_q > 0 and n_kv > 0 and columns % (n_q + 2 * n_kv) == 0,
          f"qkv's {columns} columns are not {n_q} q + 2 x {n_kv} kv heads of one width")
    head_dim = columns // (n_q + 2 * n_kv)
    check(head_dim % 2 == 0, f"head_dim must be even, got {head_dim}")
    for name, t in (("cos", cos), ("sin", sin)):
        check(t.shape == (tokens, head_dim // 2) and t.dtype == torch.float32
              and t.is_contiguous() and t.device == like.device,
              f"{name} must be contiguous float32 [tokens={tokens}, head_dim/2="
              f"{head_dim // 2}] on {like.device}, got {t.dtype} {tuple(t.shape)} on {t.device}")
    if store is None:
        return
    check(len(store) == 3, f"store must be (k_cache, v_cache, slot_mapping), got {len(store)} "
                           f"items")
    k_cache, v_cache, slot_mapping = store
    paged_kernels.check_cache(k_cache, v_cache, like.dtype, like.device)
    check(k_cache.shape[2:] == (n_kv, head_dim),
          f"cache heads x head_dim {tuple(k_cache.shape[2:])} differ from the row's "
          f"{(n_kv, head_dim)}")
    check(slot_mapping.dtype == torch.int64 and slot_mapping.shape == (tokens,)
          and slot_mapping.is_contiguous() and slot_mapping.device == like.device,
          f"slot_mapping must be a contiguous int64 [tokens={tokens}] on {like.device}, "
          f"got {slot_mapping.dtype} {tuple(slot_mapping.shape)} on {slot_mapping.device}")


# --- SwiGLU over [gate | up] ---------------------------------------------------------------

@triton.jit
def _swiglu_packed_kernel(gate_up_ptr, out_ptr, n, width, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row, col = offs // width, offs % width
    gate = tl.load(gate_up_ptr + row * 2 * width + col, mask=mask, other=0.0)
    up = tl.load(gate_up_ptr + row * 2 * width + width + col, mask=mask, other=0.0)
    g = gate.to(tl.float32)
    silu = (g * tl.sigmoid(g)).to(gate.dtype)  # rounded before the product, as v09's swiglu
    tl.store(out_ptr + offs, (silu.to(tl.float32) * up.to(tl.float32)).to(gate.dtype), mask=mask)


@kernel_op(f"{_NS}::swiglu_packed")
def _swiglu_packed_op(gate_up: torch.Tensor) -> torch.Tensor:
    width = gate_up.shape[1] // 2
    out = gate_up.new_empty(gate_up.shape[0], width)
    n = out.numel()
    if n:
        _swiglu_packed_kernel[(triton.cdiv(n, ELEMENTWISE_BLOCK),)](
            gate_up, out, n, width, BLOCK=ELEMENTWISE_BLOCK)
    return out


@fake_of(_swiglu_packed_op)
def _(gate_up):
    return gate_up.new_empty(gate_up.shape[0], gate_up.shape[1] // 2)


def swiglu_packed(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [rows, 2 * width] = [gate | up] -> silu(gate) * up [rows, width]."""
    check_tensor("gate_up", gate_up)
    check(gate_up.dim() == 2 and gate_up.shape[1] % 2 == 0,
          f"gate_up must be [rows, 2 * width], got shape {tuple(gate_up.shape)}")
    return _swiglu_packed_op(gate_up)


# --- the greedy draw: each row's argmax in one read of the logits -----------------------------

# Columns one program scans: a 151,936-token vocabulary is 75 programs a row, so that even one
# row spreads over the SMs (torch's reduction gives a row one block; at batch 1 that is one SM).
# A row of at most this many columns is one chunk, and its pick is the chunk's own: one launch.
ARGMAX_CHUNK = 2048


@triton.jit
def _argmax_chunks_kernel(x_ptr, best_ptr, at_ptr, n_cols, x_stride, chunks,
                          BLOCK: tl.constexpr):
    # One chunk of one row to its (largest value, first column holding it).
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols,
                other=float("-inf")).to(tl.float32)
    # A NaN compares false with everything, so a max would skip it; torch's argmax takes it as
    # the largest value: count it as +inf.
    x = tl.where(x != x, float("inf"), x)
    best = tl.max(x, axis=0)
    # The first column holding it, said outright: tl.max's own index may land on any of a tie.
    at = tl.min(tl.where(x == best, cols, n_cols), axis=0)
    tl.store(best_ptr + row * chunks + chunk, best)
    tl.store(at_ptr + row * chunks + chunk, at.to(tl.int64))


@triton.jit
def _argmax_pick_kernel(best_ptr, at_ptr, out_ptr, chunks, BLOCK_C: tl.constexpr):
    # The first chunk holding the row's largest value, and its first column: the row's first
    # largest value, the index torch's argmax returns for a tie.
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK_C)
    live = c < chunks
    best = tl.load(best_ptr + row * chunks + c, mask=live, other=float("-inf"))
    top = tl.max(best, axis=0)
    which = tl.min(tl.where(live & (best == top), c, BLOCK_C), axis=0)
    tl.store(out_ptr + row, tl.load(at_ptr + row * chunks + which))


@kernel_op(f"{_NS}::argmax_rows")
def _argmax_rows_op(logits: torch.Tensor) -> torch.Tensor:
    rows, n_cols = logits.shape
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    if rows == 0:
        return out
    chunks = triton.cdiv(n_cols, ARGMAX_CHUNK)
    # torch.empty launches nothing: each chunk's (largest value, its column), read by the pick.
    best = torch.empty(rows, chunks, dtype=torch.float32, device=logits.device)
    if chunks == 1:  # a row in one chunk: its first largest column is the answer, one launch
        _argmax_chunks_kernel[(rows, 1)](logits, best, out, n_cols, logits.stride(0), 1,
                                         BLOCK=triton.next_power_of_2(n_cols))
        return out
    at = torch.empty(rows, chunks, dtype=torch.int64, device=logits.device)
    _argmax_chunks_kernel[(rows, chunks)](logits, best, at, n_cols, logits.stride(0), chunks,
                                          BLOCK=ARGMAX_CHUNK)
    _argmax_pick_kernel[(rows,)](best, at, out, chunks, BLOCK_C=triton.next_power_of_2(chunks))
    return out


@fake_of(_argmax_rows_op)
def _(logits):
    return logits.new_empty(logits.shape[0], dtype=torch.int64)


def argmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """logits [rows, vocab] -> each row's index of its largest value [rows] (int64), the first
    one where several tie, a NaN counted as the largest: torch's argmax over the last dim."""
    check(logits.dtype in kernels.DTYPES,
          f"logits must be float32, float16 or bfloat16, got {logits.dtype}")
    check(logits.dim() == 2 and logits.shape[1] >= 1,
          f"logits must be [rows, vocab] with vocab >= 1, got shape {tuple(logits.shape)}")
    # Rows may lie apart (a view of every row's last position), columns side by side.
    check(logits.stride(1) == 1 or logits.shape[1] == 1,
          f"logits' columns must be contiguous (strides {logits.stride()})")
    return _argmax_rows_op(logits)
