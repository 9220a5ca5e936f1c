"""A one-row decode step's attention and the o projection after it in one launch.

At one row a layer is a chain of launches, each a product or an attention whose output the next
needs whole: the q/k/v gemv, v10's paged decode attention, the o gemv, [gate | up]'s norm_gemv,
down's gemv. Each launch pays its start and its first trip to memory. Here the attention and the
o gemv are one launch whose programs hand the heads' output over within it:

- its first programs are v10's decode kernel's, one a request and KV head (the online softmax of
  _attend_heads); each writes its heads' output as v10's kernel writes it, then adds one to a
  count of attention programs done (an atomic add, after a barrier, with release order: every
  store of the program is visible before the count says so);
- the rest are the o gemv's programs (O_ROWS of o's rows each on a GPU, gemv's sums); each
  loads its first weight tile, waits for the launch before (launched dependent, as the gemv
  is), takes a ticket (an atomic add to a count of o programs, which returns the count before
  it), reads the count of attention programs done (with acquire order) until it reaches the
  ticket's launch's last, then reads the heads' output from L2 (the ".cg" loads: an SM's L1 is
  not kept coherent within a launch) and multiplies as gemv does.

Neither count is ever lowered: every launch of one shape adds the same to each (its attention
programs and its o programs), and a launch's programs add only after every program of the
launch before has ended (each waits first, and a launch ends after the one before it through the
chain of waits), so an o program's ticket says which launch it is in: ticket // (o programs a
launch) launches of this shape came before it, and its heads are all written once the count of
attention programs done reaches that number plus one, times the attention programs a launch.
No program waits on another at the end of a launch (a count lowered there, by the last o program
once the others had counted themselves, held each launch's end: 1.4-1.8% of a batch-1 step's
kernel time on an H100, docs/perf-notes.md). The counts are int64 (they never wrap), a pair a
device and shape (_counts), made zero on that shape's first launch (a step's warm-up launches
before a graph is captured): one such launch at a time on a device, as a step's chain on one
stream gives.

A program waiting for others of its own launch is safe where those others are sure to run: CUDA
starts a launch's programs in the order of their index (as single-pass scans, CUB's among them,
rely on), so the attention's programs, the first indices, run before any o program waits; and
a launch launched dependent starts only once every program of the launch before it runs.

Only where the attention is one launch of v10's (its plan does not split the context: under
MIN_SPLIT_CONTEXT tokens of table at one row) and o takes the gemv (FusedOps.takes_gemv):
elsewhere the decode attention runs as before and o is a product of its own (and on a GPU only
while ON_GPU says so). decode_attention, the memory's decode function, leaves the
attention pending (Attention) at one row, and the ops' output projection launches it with o
(attend_project) or alone (attend).

The numbers: the heads' output the bits v10 writes, o's product the bits gemv gives them (its
shares of k summed as gemv's split sums add them), under the interpreter; on a GPU the same
sums compiled in another kernel, within the dtype's tolerance."""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from torchlet.contract import fake_of, kernel_op

from ..v12_prefix_cache import kernels, paged_kernels
from . import gemv

check = kernels.check

# Whether a CUDA device's decode steps take this launch: yes. Timed on an H100 against the
# attention and the o gemv as two launches (docs/probes/attend_project_rows.py, docs/perf-notes.md,
# 2026-12-07), at 8 rows: a batch-1 step's kernels 1.4-1.8% longer at Qwen2.5-0.5B's shape and
# 0.6% at Qwen3-0.6B's, in 24 and 56 launches fewer (138 -> 114, 241 -> 185): the 120.
ON_GPU = True

# o's rows a program multiplies on a GPU: 8, the best of 4, 8 and 16 at Qwen2.5-0.5B's shape on
# an H100 (the same probe; Qwen3-0.6B's best was 4, 0.9% faster than 8). Fixed, not fitted to
# o's width: 16 KB of o a program gave a 64-wide model a tile of 128 rows x BLOCK_K, whose compile
# for sm_90a took minutes, and the GPU suite did not finish (docs/gpu.md, 2026-12-07).
O_ROWS = 8

_NS = __name__.replace(".", "_")

# (device, attention programs, o programs) -> [attention programs done, o programs' tickets],
# int64, zero at first and never lowered (the module's docstring). A dict the op reads.
_COUNTS: dict[tuple[torch.device, int, int], torch.Tensor] = {}


def _counts(device: torch.device, attending: int, programs: int) -> torch.Tensor:
    key = (device, attending, programs)
    if key not in _COUNTS:
        _COUNTS[key] = torch.zeros(2, dtype=torch.int64, device=device)
    return _COUNTS[key]


@triton.jit
def _attend(q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, heads_ptr, counts_ptr, pid, scale, q_sb,
            q_sh, cache_sblock, cache_stok, cache_shead, tables_sb, width, kv_heads, group,
            head_dim, PAGE: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr,
            BLOCK_T: tl.constexpr, PRECISION: tl.constexpr, PDL: tl.constexpr):
    """A program of v10's decode kernel (one request x one KV head, its group of query heads):
    the heads' output written into the merged row, then counted done."""
    b = (pid // kv_heads).to(tl.int64)
    kv_head = pid % kv_heads
    context = tl.load(lens_ptr + b)
    m, l, acc = paged_kernels._attend_heads(
        q_ptr, k_ptr, v_ptr, tables_ptr, b, kv_head, 0, context, context, scale, q_sb, q_sh,
        cache_sblock, cache_stok, cache_shead, tables_sb, group, head_dim, PAGE, BLOCK_G,
        BLOCK_D, BLOCK_T, PRECISION, PDL)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    # as v10's kernel writes it, into the merged row [rows, heads * head_dim]
    paged_kernels.write_heads(heads_ptr, b, width, head_dim, kv_head * group + g, d,
                              (g < group)[:, None] & (d < head_dim)[None, :], acc, l)
    tl.debug_barrier()  # every thread's stores made before the count says so
    tl.atomic_add(counts_ptr, 1, sem="release", scope="gpu")


@triton.jit
def _project(w_ptr, bias_ptr, heads_ptr, out_ptr, counts_ptr, j, n, width, attending, blocks,
             chunk, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr,
             PDL: tl.constexpr):
    """The o gemv's program j: request b's rows [lo, lo + BLOCK_N) of o, once every head of
    its launch is written."""
    b = (j // blocks).to(tl.int64)
    rows = (j % blocks).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    live = rows < n
    w_next = gemv.weight_tile(w_ptr, rows, live, width, tl.arange(0, BLOCK_K),
                               tl.minimum(chunk, width))
    if PDL:
        tl.extra.cuda.gdc_wait()
    ticket = tl.atomic_add(counts_ptr + 1, 1, sem="relaxed", scope="gpu")
    done = (ticket // (tl.num_programs(0) - attending) + 1) * attending
    while tl.atomic_add(counts_ptr, 0, sem="acquire", scope="gpu") < done:
        pass
    # gemv's sums: a share of k at a time, the shares added in its split sums' order.
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for lo in range(0, width, chunk):
        hi = tl.minimum(lo + chunk, width)
        acc += gemv.sums(heads_ptr + b * width, w_ptr, rows, live, width, lo, hi, w_next, False,
                         BLOCK_N, BLOCK_K, ".cg")
        w_next = gemv.weight_tile(w_ptr, rows, live, width, hi + tl.arange(0, BLOCK_K),
                                   tl.minimum(hi + chunk, width))
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rows, mask=live, other=0.0).to(tl.float32)
    tl.store(out_ptr + b * n + rows, acc.to(out_ptr.dtype.element_ty), mask=live)


@triton.jit
def _attend_project_kernel(
        q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, w_ptr, bias_ptr, heads_ptr, out_ptr,
        counts_ptr, scale, q_sb, q_sh, cache_sblock, cache_stok, cache_shead, tables_sb, n,
        width, kv_heads, group, head_dim, attending, blocks, chunk, PAGE: tl.constexpr,
        BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr,
        PRECISION: tl.constexpr, PDL: tl.constexpr):
    # Programs [0, attending) attend, the rest multiply by o (the module's docstring).
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0)
    if pid < attending:
        _attend(q_ptr, k_ptr, v_ptr, tables_ptr, lens_ptr, heads_ptr, counts_ptr, pid, scale,
                q_sb, q_sh, cache_sblock, cache_stok, cache_shead, tables_sb, width, kv_heads,
                group, head_dim, PAGE, BLOCK_G, BLOCK_D, BLOCK_T, PRECISION, PDL)
    else:
        _project(w_ptr, bias_ptr, heads_ptr, out_ptr, counts_ptr, pid - attending, n, width,
                 attending, blocks, chunk, BLOCK_N, BLOCK_K, HAS_BIAS, PDL)


@kernel_op(f"{_NS}::attend_project")
def _attend_project_op(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                       weight: torch.Tensor, bias: torch.Tensor | None,
                       dependent: bool) -> torch.Tensor:
    (batch, heads, head_dim), kv_heads = q.shape, k_cache.shape[2]
    n, width = weight.shape
    out = q.new_empty(batch, n)
    if batch == 0 or n == 0:
        return out
    # torch.empty launches nothing and is capture-safe: a graph keeps its own buffer.
    merged = q.new_empty(batch, width)  # the heads' output, written and read in the launch
    block_n, block_k, chunk, _ = gemv.split_plan(n, width, q.is_cuda)
    block_n = O_ROWS if q.is_cuda else block_n
    blocks = triton.cdiv(n, block_n)
    attending = batch * kv_heads
    _attend_project_kernel[(attending + batch * blocks,)](
        q, k_cache, v_cache, block_tables, context_lens, weight,
        bias if bias is not None else weight, merged, out,
        _counts(q.device, attending, batch * blocks), scale,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), n, width, kv_heads, heads // kv_heads, head_dim, attending,
        blocks, chunk, PAGE=k_cache.shape[1], BLOCK_G=paged_kernels._pad(heads // kv_heads),
        BLOCK_D=paged_kernels._pad(head_dim), BLOCK_T=paged_kernels.BLOCK_N, BLOCK_N=block_n,
        BLOCK_K=block_k, HAS_BIAS=bias is not None,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        **paged_kernels.dependent_launch(dependent))
    return out


@fake_of(_attend_project_op)
def _(q, k_cache, v_cache, block_tables, context_lens, scale, weight, bias, dependent):
    return q.new_empty(q.shape[0], weight.shape[0])


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
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """gemv(attend(a) with its heads merged, weight, bias) in one launch: [rows, n] for weight
    [n, heads * head_dim]. Launched dependent where gemv's kernels are."""
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
    return _attend_project_op(q, a.k_cache, a.v_cache, a.block_tables, a.context_lens, a.scale,
                              weight, bias, gemv.launches_dependent(q))
