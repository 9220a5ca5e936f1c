"""A one-row decode step's attention and the o projection after it in one launch.

At one row a layer is a chain of launches, each a product or an attention whose output the next
needs whole: the q/k/v gemv, v10's paged decode attention, the o gemv, [gate | up]'s norm_gemv,
down's gemv. Each launch pays its start and its first trip to memory. The attention and o
meet at a seam a launch need not cross: o's output is a sum over the query heads, so each KV
head's group of query heads can multiply its own columns of o's weight, and the sums of the
groups add up later. Here each program attends one KV head's group, as a program of v10's
kernel does (its online softmax, _attend_heads), rounds the heads' output as v10 writes it,
then multiplies it by its group's columns of a block of o's weight rows, and writes float32
shares, one [m, n] row a KV head (gemv.Shares); the launch after ([gate | up]'s norm_gemv) adds
them up, in order, before it joins the stream. A group is attended by as many programs as it
has blocks of o's rows (the context's K/V read again from L2 after the first), so that o's
weight is read by about as many programs as the gemv would read it with.

Only where the attention is one launch of v10's (its plan does not split the context: under
MIN_SPLIT_CONTEXT tokens of table at one row) and the ops fuse the MLP's norms (the shares'
taker): elsewhere the decode attention runs as before and o is a gemv of its own. And not yet
in a GPU's decode steps (ON_GPU): its specs pass on one, but it measured no faster there.
decode_attention, the memory's decode function, leaves the attention pending (Attention) at one
row, and the ops' output projection launches it with o (attend_project) or alone (attend).

The numbers: the heads' output the bits v10 writes; o's sums in float32 over a group's columns
and then over the groups, where the gemv summed all the columns in one order: within the
dtype's tolerance of the chain of two launches, not its bits."""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from torchlet.contract import fake_of, kernel_op

from ..v12_prefix_cache import kernels, paged_kernels
from . import gemv

check = kernels.check

# o's weight rows a program multiplies on a GPU, at least: about 7 KB of Qwen2.5-0.5B's o a
# program (8 rows of a group's 448 columns), as the gemv's 4 rows of 896 read; more where the
# KV heads times o's blocks would pass about PROGRAMS (each program attends its group again,
# from L2: Qwen3-0.6B's 8 KV heads would make 1,024). BLOCK_O rows a tile, the next tile loaded
# while the sums of one run: at 8 rows, the program's whole share of o loaded before its wait.
ROWS_PER_PROGRAM = 8
PROGRAMS = 256
BLOCK_O = 8
# Under the interpreter, which runs programs one after another (each attending its group
# again): blocks of 64 of o's rows, two tiles each, so a spec's o of more rows sees both loops
# (at 16 rows a program the shares' spec took 2.4 times as long).
INTERPRETED_BLOCK_O = 32
# Whether a CUDA device's decode steps take this launch. No: its GPU specs pass, but timed on an
# H100 (docs/probes/attend_project_rows.py, docs/perf-notes.md, 2026-12-07) its steps were no
# faster than the two launches at 128 tokens, 6% slower at 384 and 45% slower at Qwen3-0.6B's
# heads: each program attends its group again for its block of o's rows. A GPU's steps run the
# attention and o as before; this runs under the interpreter and in the GPU specs that call it.
ON_GPU = False

_NS = __name__.replace(".", "_")


@triton.jit
def _o_tile(w_ptr, rows, hi, width, cols, on):
    """o's weight at rows `rows` (below hi) and a group's columns cols [G, D] (on where a head
    and a dimension are real): [BLOCK_O, G, D], zeros elsewhere."""
    return tl.load(w_ptr + rows[:, None, None].to(tl.int64) * width + cols[None, :, :],
                   mask=(rows < hi)[:, None, None] & on[None, :, :], other=0.0)


@triton.jit
def _attend_project_kernel(
        q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, w_ptr, part_ptr, scale,
        q_sb, q_sh, cache_sblock, cache_stok, cache_shead, tables_sb,
        n, width, m, group, head_dim, rows_per_program, PAGE: tl.constexpr,
        BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_O: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
    # One program = one request x one KV head x one block of o's rows.
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    b = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    lo = tl.program_id(2) * rows_per_program
    hi = tl.minimum(lo + rows_per_program, n)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    on = (g < group)[:, None] & (d < head_dim)[None, :]
    cols = (kv_head * group + g)[:, None] * head_dim + d[None, :]  # the group's o columns
    # The first tile of o's weight before anything else: no launch writes a weight.
    w_next = _o_tile(w_ptr, lo + tl.arange(0, BLOCK_O), hi, width, cols, on)
    context = tl.load(lens_ptr + b)
    m_run, l, acc = paged_kernels._attend_heads(
        q_ptr, k_ptr, v_ptr, tables_ptr, b, kv_head, 0, context, context, scale, q_sb, q_sh,
        cache_sblock, cache_stok, cache_shead, tables_sb, group, head_dim, PAGE, BLOCK_G,
        BLOCK_D, BLOCK_N, PRECISION, PDL)
    # The heads' output as v10's kernel writes it (a context of 0 gives zeros), rounded to the
    # model's dtype as the o gemv would read it.
    out = acc / tl.where(l > 0, l, 1.0)[:, None]
    out = out.to(q_ptr.dtype.element_ty).to(tl.float32)
    for start in range(lo, hi, BLOCK_O):
        rows = start + tl.arange(0, BLOCK_O)
        w = w_next
        w_next = _o_tile(w_ptr, rows + BLOCK_O, hi, width, cols, on)
        share = tl.sum(tl.sum(w.to(tl.float32) * out[None, :, :], axis=2), axis=1)
        tl.store(part_ptr + (kv_head * m + b) * n + rows, share, mask=rows < hi)


def _plan(n: int, kv_heads: int, on_gpu: bool) -> tuple[int, int]:
    """(o's rows a program multiplies, rows a tile)."""
    if not on_gpu:
        return 2 * INTERPRETED_BLOCK_O, INTERPRETED_BLOCK_O
    rows = triton.next_power_of_2(triton.cdiv(n * kv_heads, PROGRAMS))
    return max(ROWS_PER_PROGRAM, rows), BLOCK_O


@kernel_op(f"{_NS}::attend_project")
def _attend_project_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                       weight: torch.Tensor, dependent: bool) -> torch.Tensor:
    (batch, heads, head_dim), kv_heads = q.shape, k_cache.shape[2]
    n = weight.shape[0]
    part = torch.empty(kv_heads, batch, n, dtype=torch.float32, device=q.device)
    if batch == 0 or n == 0:
        return part
    rows, block_o = _plan(n, kv_heads, q.is_cuda)
    _attend_project_kernel[(batch, kv_heads, triton.cdiv(n, rows))](
        q, k_cache, v_cache, block_tables, context_lens, weight, part, scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), n, weight.shape[1], batch, heads // kv_heads, head_dim, rows,
        PAGE=k_cache.shape[1], BLOCK_G=paged_kernels._pad(heads // kv_heads),
        BLOCK_D=paged_kernels._pad(head_dim), BLOCK_N=paged_kernels.BLOCK_N, BLOCK_O=block_o,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        **paged_kernels.dependent_launch(dependent))
    return part


@fake_of(_attend_project_op)
def _(q, k_cache, v_cache, block_tables, context_lens, scale, weight, dependent):
    return q.new_empty(k_cache.shape[2], q.shape[0], weight.shape[0], dtype=torch.float32)


class Attention(NamedTuple):
    """A decode step's attention not launched yet (decode_attention's, at one row): v10's
    paged_decode_attention's arguments. The launch that takes it runs it alone (attend) or with
    the o projection (attend_project)."""
    q: torch.Tensor  # [rows, heads, head_dim]
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    context_lens: torch.Tensor
    scale: float


def decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale,
                     fixed_chunk: int = 0):
    """The memory's decode attention: gemv's dependent_decode_attention, but at one row, where
    v10's plan runs it as one launch (no split context), left pending (Attention), its inputs
    checked: the o projection may take it into its own launch. On a CUDA device only once
    ON_GPU says so."""
    if q.shape[0] == 1 and not fixed_chunk and (ON_GPU or not q.is_cuda):
        paged_kernels.check_decode(q, k_cache, v_cache, block_tables, context_lens)
        if paged_kernels.decode_plan(q, k_cache, block_tables)[0] == 1:
            return Attention(q, k_cache, v_cache, block_tables, context_lens, float(scale))
    return gemv.dependent_decode_attention(q, k_cache, v_cache, block_tables, context_lens,
                                           scale, fixed_chunk)


def attend(a: Attention) -> torch.Tensor:
    """A pending attention launched alone, as decode_attention would have: [rows, heads,
    head_dim]."""
    return gemv.dependent_decode_attention(a.q, a.k_cache, a.v_cache, a.block_tables,
                                           a.context_lens, a.scale)


def attend_project(a: Attention, weight: torch.Tensor,
                   bias: torch.Tensor | None = None) -> gemv.Shares:
    """attend(a) with its heads merged, times weight [n, heads * head_dim] transposed (+ bias),
    in one launch, its sums left in shares (gemv.Shares: one float32 [rows, n] a KV head, and
    the bias) for the launch after to add up. Launched dependent where gemv's kernels are."""
    q = a.q
    paged_kernels.check_decode(q, a.k_cache, a.v_cache, a.block_tables, a.context_lens)
    check(weight.dim() == 2 and weight.shape[1] == q.shape[1] * q.shape[2],
          f"o's weight must be [n, {q.shape[1] * q.shape[2]}] (the heads merged), got "
          f"{tuple(weight.shape)}")
    kernels.check_tensor("weight", weight, like=q)
    if bias is not None:
        kernels.check_tensor("bias", bias, like=q)
        check(bias.shape == (weight.shape[0],),
              f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    part = _attend_project_op(q, a.k_cache, a.v_cache, a.block_tables, a.context_lens, a.scale,
                              weight, gemv.launches_dependent(q))
    return gemv.Shares(part, bias)
