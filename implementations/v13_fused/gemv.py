"""A batch-1 decode step's projections as one Triton kernel each (gemv): one row x [1, k] times
a weight matrix [n, k] that the step reads once. Given more rows, each row gets programs of its
own, which sum it exactly as they sum a lone row: a row's result is the same bits whatever rows
come with it (the rows' programs are launched side by side, so they meet the same weight tiles
in the L2 cache; a later version's batch-invariant mode runs every product so).

At one row a projection does two flops per weight it reads, so its time is the time to read the
weights, and at this model's sizes (a few MB a matrix) most of that is the time to get every SM
reading. cuBLAS's kernels are tiled for many rows: on the H200 a q/k/v or o product of one row
takes 4.2-4.7 us for 1.6-2.1 MB, and down runs split over k, with a reducing launch after it
(docs/perf-notes.md). Here a program reads BLOCK_N whole weight rows in BLOCK_K-wide chunks and
sums each row's products in registers: 3.4 and 2.9 us. A long k (down's) is split over
programs, whose float32 partial sums a second, small launch adds in a fixed order.

The down projection's input is SwiGLU's output, which swiglu_packed wrote in a launch of its
own. With swiglu=True the kernel reads the gate/up GEMM's row [gate | up] itself and forms
silu(gate) * up as it goes, rounded where swiglu_packed rounds it: one launch and one trip
through memory fewer a layer, the same numbers.

A layer's MLP part meets two norms (v09's add_rms_norm after attention, and after the MLP), each
a launch over one row of hidden_size values. norm_gemv forms the first inside the [gate | up]
product: every program adds the attention's output to the stream and norms the row itself, then
multiplies. gemv_add_norm is down's gemv whose partial sums a launch of one program a row adds
up in gemv's order, adds to the stream and norms by the weight of what follows. Five launches
(norm, gate/up, down, its split sums, norm) become two, the same numbers (FusedOps.mlp_sublayer).
In a decode step that second launch goes too: down's partial sums are left pending (Pending,
pending_add_norm), and the next layer's q/k/v launch (gemv_rope_split) forms the row in every
one of its programs, as norm_gemv forms its own; settle runs the launch where nothing takes it.

Where it is not used (FusedOps.takes_gemv): at more than one row, and for a matrix of more than
GEMV_MAX_N weight rows (gate/up's 9,728, the LM head's 151,936), whose many tiles cuBLAS already
reads about as fast (7.2 against 7.4 us for gate/up). At 4 and 16 rows the tensor-core variants
of this kernel gained under 1% of a step, and down lost.

On Hopper and later these kernels launch dependent on the launch before them (CUDA's
programmatic dependent launch, launches_dependent): a kernel's programs start while the one
before still runs, load their first weight tile (no kernel writes a weight), then wait for that
launch's writes (gdc_wait) before they read anything else; each lets the launch after it start
as soon as all its programs run (gdc_launch_dependents). A one-row step is a chain of short
launches, each paying its start and its first trip to memory: overlapped so, a batch-1 step
took 0.85 ms where it took 0.93 (H100, docs/gpu.md, 2026-12-06). Every program reads each
weight tile one tile ahead of its sums, so the loads are in flight while it multiplies. The
attention between the q/k/v and o products launches dependent too (attend_project's launch, or
v10's paged decode attention where it splits a context: dependent_decode_attention), so the
chain does not stop around it each layer; before its wait it loads only what no launch of the
chain writes (the lengths, the tables, the first tile of the older tokens' K/V), and its
queries after.

Sums in float32, the output rounded once to the model dtype (the bias added first), as a GEMM's
epilogue does; the summation order differs from cuBLAS's, so results agree within the dtype's
tolerance, not bit for bit.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from torchlet.contract import fake_of, kernel_op

from ..v12_prefix_cache import kernels, paged_kernels
from . import fused_kernels

check, check_tensor = kernels.check, kernels.check_tensor

GEMV_MAX_N = 4096  # weight rows; past this cuBLAS's tiles keep the GPU reading
SUM_BLOCK = 1024

_NS = __name__.replace(".", "_")


@triton.jit
def weight_tile(w_ptr, rows, live_rows, k, ks, hi):
    """Weight rows `rows` (a [n, k] matrix's) at columns ks, zeros where a row is not live or a
    column is at or past hi: the tile every one-row product reads."""
    return tl.load(w_ptr + rows[:, None] * k + ks[None, :],
                   mask=live_rows[:, None] & (ks < hi)[None, :], other=0.0)


@triton.jit
def sums(x_ptr, w_ptr, rows, live_rows, k, lo, hi, w_next, SWIGLU: tl.constexpr,
         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CACHE: tl.constexpr):
    """One program's float32 sums of row x's columns [lo, hi) times weight rows `rows` ([n, k]
    weight; live_rows the real ones), BLOCK_K columns a tile, w_next the first tile already
    loaded (each next one loaded a tile ahead of its use). With SWIGLU, x is [gate | up] (2k
    wide) and the product's input silu(gate) * up. CACHE: the loads' cache modifier for x
    ("" the default; attend_project reads a row written within its own launch)."""
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        live = ks < hi
        w = w_next
        w_next = weight_tile(w_ptr, rows, live_rows, k, ks + BLOCK_K, hi)
        if SWIGLU:
            gate = tl.load(x_ptr + ks, mask=live, other=0.0, cache_modifier=CACHE)
            up = tl.load(x_ptr + k + ks, mask=live, other=0.0, cache_modifier=CACHE)
            g = gate.to(tl.float32)
            silu = (g * tl.sigmoid(g)).to(gate.dtype)  # rounded as swiglu_packed rounds it
            a = (silu.to(tl.float32) * up.to(tl.float32)).to(gate.dtype).to(tl.float32)
        else:
            a = tl.load(x_ptr + ks, mask=live, other=0.0, cache_modifier=CACHE).to(tl.float32)
        acc += tl.sum(w.to(tl.float32) * a[None, :], axis=1)
    return acc


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, n, k, chunk, SWIGLU: tl.constexpr,
                 HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0).to(tl.int64)  # the input row; its programs next to each other
    rows = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)  # weight rows
    lo = tl.program_id(2) * chunk  # this program's share of the k columns
    x_ptr += row * (2 * k if SWIGLU else k)
    hi = tl.minimum(lo + chunk, k)
    # The first weight tile before the wait (launches_dependent says why); each next one a tile
    # ahead of its use.
    w_next = weight_tile(w_ptr, rows, rows < n, k, lo + tl.arange(0, BLOCK_K), hi)
    if PDL:
        tl.extra.cuda.gdc_wait()
    acc = sums(x_ptr, w_ptr, rows, rows < n, k, lo, hi, w_next, SWIGLU, BLOCK_N, BLOCK_K, "")
    if PARTIAL:  # a partial sum, in float32, to this share's row of the workspace
        tl.store(out_ptr + (tl.program_id(2) * tl.num_programs(0) + row) * n + rows, acc,
                 mask=rows < n)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + rows, mask=rows < n, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * n + rows, acc.to(out_ptr.dtype.element_ty), mask=rows < n)


@triton.jit
def _sum_splits_kernel(part_ptr, bias_ptr, out_ptr, n, total, SPLIT: tl.constexpr,
                       HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # of the rows' outputs, row-major
    live = offs < total
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(SPLIT):  # always in the same order: the same sums every call
        acc += tl.load(part_ptr + split * total + offs, mask=live, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs % n, mask=live, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=live)


@triton.jit
def _normed(s, rstd, norm_ptr, cols, live):
    """The norm's output at columns cols of a row of the stream s whose 1 / rms is rstd: s
    scaled in float32, rounded to its dtype, then times the norm's weight, the rounding points
    of v09's add_rms_norm."""
    return tl.load(norm_ptr + cols, mask=live, other=0.0) * (s.to(tl.float32) * rstd).to(s.dtype)


@triton.jit
def _stream_cols(part_ptr, bias_ptr, res_ptr, row, n, m, cols, live, SPLIT: tl.constexpr,
                 HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    """Columns cols of row `row` of the stream once a product joins it: the product's float32
    partial sums ([SPLIT, m, n], one share of k each) added up in _sum_splits_kernel's order
    (the bits gemv gives), its bias, then rounded and added to the stream before it (res) as
    v09's add_rms_norm adds: what every launch that forms a pending row (Pending) computes."""
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(SPLIT):  # in _sum_splits_kernel's order: the bits gemv gives
        acc += tl.load(part_ptr + (split * m + row) * n + cols, mask=live, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=live, other=0.0).to(tl.float32)
    res = tl.load(res_ptr + row * n + cols, mask=live, other=0.0)
    return kernels.add_rounded(acc.to(res.dtype), res)


@triton.jit
def _joined(x_ptr, res_ptr, row, k, cols, live):
    """Columns cols of row `row` of the stream once the product x (a row [m, k] in the stream's
    dtype) joins it, added as v09's add_rms_norm adds."""
    return kernels.add_rounded(tl.load(x_ptr + row * k + cols, mask=live, other=0.0),
                               tl.load(res_ptr + row * k + cols, mask=live, other=0.0))


@triton.jit
def _norm_gemv_kernel(x_ptr, res_ptr, norm_ptr, w_ptr, bias_ptr, out_ptr, res_out_ptr, n, k,
                      eps, HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      BLOCK_ROW: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    row = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)  # weight rows
    # the first weight tile before the wait, as in _gemv_kernel
    w_next = weight_tile(w_ptr, rows, rows < n, k, tl.arange(0, BLOCK_K), k)
    if PDL:
        tl.extra.cuda.gdc_wait()
    # Every program forms the stream x + residual and its mean square itself, as v09's
    # add_rms_norm does (the row is hidden_size values, read from L2 after the first program),
    # so that no launch before this one has to; the first program of the row writes the stream.
    cols = tl.arange(0, BLOCK_ROW)
    whole = cols < k
    s = _joined(x_ptr, res_ptr, row, k, cols, whole)
    if tl.program_id(1) == 0:
        tl.store(res_out_ptr + row * k + cols, s, mask=whole)
    rstd = kernels.inv_rms(s, k, eps)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        live = ks < k
        ss = _joined(x_ptr, res_ptr, row, k, ks, live)
        h = _normed(ss, rstd, norm_ptr, ks, live)
        w = w_next
        w_next = weight_tile(w_ptr, rows, rows < n, k, ks + BLOCK_K, k)
        acc += tl.sum(w.to(tl.float32) * h.to(tl.float32)[None, :], axis=1)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rows, mask=rows < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * n + rows, acc.to(out_ptr.dtype.element_ty), mask=rows < n)


@triton.jit
def _sum_add_norm_kernel(part_ptr, bias_ptr, res_ptr, norm_ptr, out_ptr, res_out_ptr, n, m, eps,
                         SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
                         PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    row = tl.program_id(0).to(tl.int64)  # one program a row: the norm needs the whole row
    cols = tl.arange(0, BLOCK)
    live = cols < n
    s = _stream_cols(part_ptr, bias_ptr, res_ptr, row, n, m, cols, live, SPLIT, HAS_BIAS, BLOCK)
    tl.store(res_out_ptr + row * n + cols, s, mask=live)
    # Then v09's add_rms_norm's norm of it, its rounding points included.
    normed = _normed(s, kernels.inv_rms(s, n, eps), norm_ptr, cols, live)
    tl.store(out_ptr + row * n + cols, normed, mask=live)


@triton.jit
def _gemv_rope_kernel(x_ptr, w_ptr, bias_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr,
                      k_cache_ptr, v_cache_ptr, slots_ptr, block_size, cache_sblock, cache_stok,
                      cache_shead, k, n_q, n_kv, half, part_ptr, part_bias_ptr, norm_ptr,
                      stream_ptr, m, eps, HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr,
                      HAS_PART_BIAS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr,
                      BLOCK_ROW: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
    token = tl.program_id(0).to(tl.int64)
    # A program's weight rows come in pairs, a head's columns c and c + half, the two that RoPE
    # turns together: so the turn, and the store, happen where the products are summed.
    pair = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)  # over q, then k, then v heads
    live_p = pair < (n_q + 2 * n_kv) * half
    head, c = pair // half, pair % half
    r1 = (head * 2 * half + c).to(tl.int64)
    r2 = r1 + half
    ks = tl.arange(0, BLOCK_K)  # the first weight tiles before the wait, as in _gemv_kernel
    w1_next = weight_tile(w_ptr, r1, live_p, k, ks, k)
    w2_next = weight_tile(w_ptr, r2, live_p, k, ks, k)
    if PDL:
        tl.extra.cuda.gdc_wait()
    if SPLIT:
        # A pending row (SPLIT shares of a product's sums, x the stream before it): every
        # program forms the stream and its norm itself, as norm_gemv does, so no launch before
        # this one has to; the token's first program writes the stream.
        cols = tl.arange(0, BLOCK_ROW)
        whole = cols < k
        s = _stream_cols(part_ptr, part_bias_ptr, x_ptr, token, k, m, cols, whole, SPLIT,
                         HAS_PART_BIAS, BLOCK_ROW)
        if tl.program_id(1) == 0:
            tl.store(stream_ptr + token * k + cols, s, mask=whole)
        rstd = kernels.inv_rms(s, k, eps)
        row = _normed(s, rstd, norm_ptr, cols, whole)
    acc1 = tl.zeros((BLOCK_P,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_P,), dtype=tl.float32)
    for start in range(0, k, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        live = ks < k
        if not SPLIT:
            a = tl.load(x_ptr + token * k + ks, mask=live, other=0.0).to(tl.float32)
        elif BLOCK_ROW == BLOCK_K:  # one tile holds the row: the one formed above
            a = row.to(tl.float32)
        else:  # the tile's columns of the row formed again
            ss = _stream_cols(part_ptr, part_bias_ptr, x_ptr, token, k, m, ks, live, SPLIT,
                              HAS_PART_BIAS, BLOCK_K)
            a = _normed(ss, rstd, norm_ptr, ks, live).to(tl.float32)
        w1, w2 = w1_next, w2_next
        w1_next = weight_tile(w_ptr, r1, live_p, k, ks + BLOCK_K, k)
        w2_next = weight_tile(w_ptr, r2, live_p, k, ks + BLOCK_K, k)
        acc1 += tl.sum(w1.to(tl.float32) * a[None, :], axis=1)
        acc2 += tl.sum(w2.to(tl.float32) * a[None, :], axis=1)
    if HAS_BIAS:
        acc1 += tl.load(bias_ptr + r1, mask=live_p, other=0.0).to(tl.float32)
        acc2 += tl.load(bias_ptr + r2, mask=live_p, other=0.0).to(tl.float32)
    # The product rounded as gemv rounds it, then rope_split's epilogue on it.
    fused_kernels.turn_and_store(
        acc1.to(q_ptr.dtype.element_ty), acc2.to(q_ptr.dtype.element_ty), head, c, live_p, token,
        cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slots_ptr, block_size,
        cache_sblock, cache_stok, cache_shead, n_q, n_kv, half, True)


# device -> launches_dependent's answer: a capability is a driver call, and a step asks each
# launch. A dict the function reads, not a cached helper: a helper entered once per process
# would be entered by whichever spec asked first, so the owned-coverage check saw v13's specs
# enter it or not by the order xdist ran them in.
_DEPENDENT: dict[torch.device, bool] = {}


def launches_dependent(x: torch.Tensor) -> bool:
    """Whether this module's kernels, given x, launch dependent on the launch before them (CUDA's
    programmatic dependent launch: on compute capability 9, Hopper, and later). Such a kernel
    starts while the launch before it is still running, reads its first weight tiles (no
    kernel writes a weight), and waits for that launch's writes (gdc_wait) before it reads
    anything else; it lets the launch after it start likewise (gdc_launch_dependents)."""
    device = x.device
    if device not in _DEPENDENT:
        _DEPENDENT[device] = (device.type == "cuda"
                              and torch.cuda.get_device_capability(device)[0] >= 9)
    return _DEPENDENT[device]


def _launch_options(x: torch.Tensor) -> dict:
    """The kernel's PDL flag and Triton's launch option for x (v10's dependent_launch)."""
    return paged_kernels.dependent_launch(launches_dependent(x))


def dependent_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale,
                               fixed_chunk: int = 0):
    """v10's paged decode attention, launched dependent where this module's kernels are
    (launches_dependent). At one row it sits between the q/k/v gemv and the o gemv (where
    attend_project does not take it: a context v10 splits, o not a gemv, a GPU, where
    attend_project.ON_GPU is off); launched plainly it would stop the chain's overlap each
    layer (the o product's programs could not start and load their weights while it ends). It
    waits before it reads the q/k/v gemv's
    output (its queries, and the newest token's K/V, which that launch stores): v10's promise
    holds, since in a decode step that launch writes nothing else the attention reads. At more
    rows the launch before (rope_split, after cuBLAS's GEMM) is plain, so there is nothing to
    overlap, and the early loads cost a batch-256 step 0.2 ms (H100, docs/gpu.md): plain."""
    return paged_kernels.paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens,
                                                scale, fixed_chunk,
                                                dependent=q.shape[0] == 1
                                                and launches_dependent(q))


def plan(n: int, k: int, on_gpu: bool) -> tuple[int, int, int]:
    """(BLOCK_N weight rows and BLOCK_K columns a program reads at a time, programs k is split
    over). Blocks of 4 weight rows, so that even 896 of them keep every SM reading (measured on
    the H200, docs/probes/gemv_variants.py, Qwen2.5-0.5B's shapes in bfloat16); a k over 1,024
    (down's 4,864) split so that no program walks more than ~1,024 columns; and those columns
    one tile, so that a program launched dependent loads all its weights before it waits: a
    chain of one-row layers took 24.6 us a layer where tiles of 512 took 27.0 (H100,
    docs/probes/dependent_chain.py --plans). Under the interpreter, which runs programs one
    after another, a few large ones, and a k over 256 split in two so the specs see the split."""
    if not on_gpu:
        return min(triton.next_power_of_2(n), 128), min(triton.next_power_of_2(k), 128), 1 + (k > 256)
    return 4, 1024, triton.cdiv(k, 1024)


def split_plan(n: int, k: int, on_gpu: bool) -> tuple[int, int, int, int]:
    """plan's (BLOCK_N, BLOCK_K) for an [n, k] matrix, the columns of k each share walks, and
    the shares it makes."""
    block_n, block_k, split = plan(n, k, on_gpu)
    chunk = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    return block_n, block_k, chunk, triton.cdiv(k, chunk)


def _launch_products(x, weight, bias, swiglu: bool, out, partial: bool):
    """The gemv programs of x @ weight.T into out, or into float32 partial sums, one row of
    [split, m, n] per share of k, where k is split or `partial` asks for them (a launch after
    reads them): -> (that workspace or None, split)."""
    n, k = weight.shape
    block_n, block_k, chunk, split = split_plan(n, k, x.is_cuda)
    part = None
    if partial or split > 1:
        part = torch.empty(split, x.shape[0], n, device=x.device, dtype=torch.float32)
    if x.shape[0]:
        _gemv_kernel[(x.shape[0], triton.cdiv(n, block_n), split)](
            x, weight, bias if bias is not None else weight, out if part is None else part, n,
            k, chunk, SWIGLU=swiglu, HAS_BIAS=bias is not None, PARTIAL=part is not None,
            BLOCK_N=block_n, BLOCK_K=block_k, **_launch_options(x))
    return part, split


@kernel_op(f"{_NS}::gemv")
def _gemv_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
             swiglu: bool) -> torch.Tensor:
    n, m = weight.shape[0], x.shape[0]
    out = x.new_empty(m, n)
    if n == 0 or m == 0:
        return out
    part, split = _launch_products(x, weight, bias, swiglu, out, partial=False)
    if part is not None:
        _sum_splits_kernel[(triton.cdiv(m * n, SUM_BLOCK),)](
            part, bias if bias is not None else weight, out, n, m * n, SPLIT=split,
            HAS_BIAS=bias is not None, BLOCK=SUM_BLOCK, **_launch_options(x))
    return out


@fake_of(_gemv_op)
def _(x, weight, bias, swiglu):
    return x.new_empty(x.shape[0], weight.shape[0])


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         swiglu: bool = False) -> torch.Tensor:
    """x [m, k] @ weight [n, k].T (+ bias [n]) -> [m, n], each row summed as a lone row is
    (one row is what a decode step gives it; more, a batch-invariant product). With swiglu, x is
    [m, 2k], rows [gate | up], and the product is silu(gate) * up @ weight.T."""
    _check_product(x, weight, bias, swiglu)
    return _gemv_op(x.contiguous(), weight, bias, bool(swiglu))  # the kernel steps rows by k


def _check_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   swiglu: bool) -> None:
    check_tensor("x", x)
    check_tensor("weight", weight, like=x)
    check(x.dim() == 2 and weight.dim() == 2,
          f"x and weight must be matrices, got shapes {tuple(x.shape)} and {tuple(weight.shape)}")
    width = weight.shape[1] * (2 if swiglu else 1)
    check(x.shape[1] == width, f"x has {x.shape[1]} columns but the weight's rows need {width}"
                               + (" ([gate | up])" if swiglu else ""))
    if bias is not None:
        check_tensor("bias", bias, like=x)
        check(bias.shape == (weight.shape[0],),
              f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")


# --- the norms that meet a product: the MLP sublayer at one row in two launches ---------------

@kernel_op(f"{_NS}::norm_gemv")
def _norm_gemv_op(x: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                  weight: torch.Tensor, bias: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    (m, k), n = residual.shape, weight.shape[0]
    out, stream = residual.new_empty(m, n), torch.empty_like(residual)
    if m:
        block_n, block_k, _ = plan(n, k, x.is_cuda)  # no split: every program forms the norm
        _norm_gemv_kernel[(m, triton.cdiv(n, block_n))](
            x, residual, norm_weight, weight, bias if bias is not None else weight, out, stream,
            n, k, eps, HAS_BIAS=bias is not None, BLOCK_N=block_n, BLOCK_K=block_k,
            BLOCK_ROW=triton.next_power_of_2(k), **_launch_options(residual))
    return out, stream


@fake_of(_norm_gemv_op)
def _(x, residual, norm_weight, eps, weight, bias):
    return residual.new_empty(residual.shape[0], weight.shape[0]), torch.empty_like(residual)


class Pending(NamedTuple):
    """A row of the stream not formed yet: the stream after a product joins it, normed by the
    norm that follows. The launch that takes it (gemv_rope_split, or settle's) adds the
    product's partial sums up in gemv's order and its bias, adds that to the stream before,
    writes the stream into `stream` and norms it: the launch that did only that is saved where
    the next product can take the row. Made by pending_add_norm."""
    part: torch.Tensor  # [split, m, n] float32: the product's partial sums, a share of k each
    bias: torch.Tensor | None  # the product's [n]
    residual: torch.Tensor  # [m, n]: the stream before the product joins it
    norm_weight: torch.Tensor  # [n]
    eps: float
    stream: torch.Tensor  # [m, n], allocated empty: written by the launch that takes the row


@kernel_op(f"{_NS}::gemv_partial")
def _gemv_partial_op(x: torch.Tensor, weight: torch.Tensor, swiglu: bool) -> torch.Tensor:
    part, _ = _launch_products(x, weight, None, swiglu, None, partial=True)
    return part


@fake_of(_gemv_partial_op)
def _(x, weight, swiglu):
    split = split_plan(*weight.shape, x.is_cuda)[3]
    return x.new_empty(split, x.shape[0], weight.shape[0], dtype=torch.float32)


@kernel_op(f"{_NS}::sum_add_norm", ("stream",))
def _sum_add_norm_op(part: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor,
                     norm_weight: torch.Tensor, eps: float, stream: torch.Tensor) -> torch.Tensor:
    (m, n), out = residual.shape, torch.empty_like(residual)
    if m:
        block = triton.next_power_of_2(n)
        _sum_add_norm_kernel[(m,)](
            part, bias if bias is not None else residual, residual, norm_weight, out, stream, n,
            m, eps, SPLIT=part.shape[0], HAS_BIAS=bias is not None, BLOCK=block,
            num_warps=min(max(block // 256, 1), 16), **_launch_options(residual))
    return out


@fake_of(_sum_add_norm_op)
def _(part, bias, residual, norm_weight, eps, stream):
    return torch.empty_like(residual)


def _check_stream(residual: torch.Tensor, norm_weight: torch.Tensor, x: torch.Tensor,
                  width: int) -> None:
    """The stream a fused norm adds to and the norm's weight: x's rows, `width` columns."""
    check_tensor("residual", residual, like=x)
    check_tensor("norm_weight", norm_weight, like=x)
    check(residual.shape == (x.shape[0], width),
          f"residual must be [{x.shape[0]}, {width}] (a row of the stream for each row of x), "
          f"got {tuple(residual.shape)}")
    check(norm_weight.shape == (width,),
          f"norm_weight must be [{width}], got {tuple(norm_weight.shape)}")
    check(1 <= width <= kernels.MAX_HIDDEN,
          f"hidden size {width} outside [1, {kernels.MAX_HIDDEN}]: one program holds one row")


def norm_gemv(x: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
              eps: float, weight: torch.Tensor, bias: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual) @ weight.T (+ bias), x + residual): v09's add_rms_norm, then
    gemv, in one launch whose programs each form the norm of the row they multiply (x,
    residual [m, k]; weight [n, k], any number of rows). The stream rounded where add_rms_norm
    rounds it, the norm's output too; k is not split over programs."""
    _check_product(x, weight, bias, False)
    check(weight.shape[0] >= 1, "weight must have at least one row (its first program writes "
                                "the stream)")
    _check_stream(residual, norm_weight, x, x.shape[1])
    return _norm_gemv_op(x, residual, norm_weight, float(eps), weight, bias)


def pending_add_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     residual: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                     swiglu: bool = False) -> tuple[Pending, torch.Tensor]:
    """gemv_add_norm's product alone: its float32 partial sums in one launch, and the row they
    make with the stream and the norm left pending (Pending) for the launch after to form.
    -> (the pending row, the stream tensor that launch writes)."""
    _check_product(x, weight, bias, swiglu)
    _check_stream(residual, norm_weight, x, weight.shape[0])
    stream = torch.empty_like(residual)
    part = _gemv_partial_op(x.contiguous(), weight, bool(swiglu))
    return Pending(part, bias, residual, norm_weight, float(eps), stream), stream


def settle(row: Pending) -> torch.Tensor:
    """A pending row formed in a launch of its own, one program a row: its stream written into
    row.stream. -> the normed row."""
    return _sum_add_norm_op(row.part, row.bias, row.residual, row.norm_weight, row.eps,
                            row.stream)


def gemv_add_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  residual: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                  swiglu: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """add_rms_norm(gemv(x, weight, bias, swiglu), residual, norm_weight, eps) -> (the normed
    stream, the stream): the product's partial sums, then one launch a row that adds them up in
    gemv's order, adds the product to the stream and norms it, where gemv's sums and v09's
    add_rms_norm took a launch each (pending_add_norm, then settle)."""
    row, stream = pending_add_norm(x, weight, bias, residual, norm_weight, eps, swiglu)
    return settle(row), stream


# --- the q/k/v product, its RoPE and the K/V store in one launch ------------------------------

@kernel_op(f"{_NS}::gemv_rope_split_store", ("k_cache", "v_cache", "stream"))
def _gemv_rope_split_store_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                              cos: torch.Tensor, sin: torch.Tensor, n_q: int, n_kv: int,
                              k_cache: torch.Tensor, v_cache: torch.Tensor,
                              slot_mapping: torch.Tensor, part: torch.Tensor | None,
                              part_bias: torch.Tensor | None, norm_weight: torch.Tensor | None,
                              eps: float, stream: torch.Tensor | None
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    (tokens, k), head_dim = x.shape, weight.shape[0] // (n_q + 2 * n_kv)
    q = x.new_empty(tokens, n_q, head_dim)
    keys, values = x.new_empty(tokens, n_kv, head_dim), x.new_empty(tokens, n_kv, head_dim)
    if tokens:
        pairs = (n_q + 2 * n_kv) * head_dim // 2
        # gemv's plan, unsplit (a pair is turned once its whole sums are in), in pairs of rows
        block_n, block_k, _ = plan(weight.shape[0], k, x.is_cuda)
        block_p = max(1, block_n // 2)
        unused = weight  # a pointer for the pending row's tensors where there is none
        _gemv_rope_kernel[(tokens, triton.cdiv(pairs, block_p))](
            x, weight, bias if bias is not None else weight, cos, sin, q, keys, values,
            k_cache, v_cache, slot_mapping, k_cache.shape[1], *k_cache.stride()[:3], k, n_q,
            n_kv, head_dim // 2, *(t if t is not None else unused
                                   for t in (part, part_bias, norm_weight, stream)),
            tokens, eps, HAS_BIAS=bias is not None,
            SPLIT=part.shape[0] if part is not None else 0, HAS_PART_BIAS=part_bias is not None,
            BLOCK_P=block_p, BLOCK_K=block_k, BLOCK_ROW=triton.next_power_of_2(k),
            **_launch_options(x))
    return q, keys, values


@fake_of(_gemv_rope_split_store_op)
def _(x, weight, bias, cos, sin, n_q, n_kv, k_cache, v_cache, slot_mapping, part, part_bias,
      norm_weight, eps, stream):
    head_dim = weight.shape[0] // (n_q + 2 * n_kv)
    return (x.new_empty(x.shape[0], n_q, head_dim), x.new_empty(x.shape[0], n_kv, head_dim),
            x.new_empty(x.shape[0], n_kv, head_dim))


def gemv_rope_split(x: torch.Tensor | Pending, weight: torch.Tensor, bias: torch.Tensor | None,
                    cos: torch.Tensor, sin: torch.Tensor, n_q: int, n_kv: int,
                    store: tuple[torch.Tensor, torch.Tensor, torch.Tensor]):
    """fused_kernels.rope_split(gemv(x, weight, bias), cos, sin, n_q, n_kv, store=store) in one
    launch: each program sums the q/k/v product's rows of a head's columns c and c + half,
    rounds them as gemv does, turns them (q and k heads) and writes q, k and v, and each
    token's k and v into its cache slot (store = (k_cache, v_cache, slot_mapping)). -> (q, k,
    v). Without Qwen3's per-head norms, which need a whole head in one program.

    x may be a pending row (Pending, the layer before's MLP output): then every program forms
    it first, as settle would (the product's partial sums added to the stream, the stream
    normed), and the first program of each token writes the stream into x.stream, so the
    launch settle makes is saved."""
    pending = x if isinstance(x, Pending) else None
    row = pending.residual if pending is not None else x
    _check_product(row, weight, bias, False)
    check(store is not None, "store must be (k_cache, v_cache, slot_mapping): this launch stores")
    fused_kernels.check_split(row.shape[0], weight.shape[0], row, cos, sin, n_q, n_kv, store)
    forming = (None, None, None, 0.0, None)  # the pending row's sums, bias, norm, eps, stream
    if pending is not None:
        check(pending.part.shape[1:] == row.shape and pending.stream.shape == row.shape,
              f"the pending row's sums {tuple(pending.part.shape)} and stream "
              f"{tuple(pending.stream.shape)} must match its stream before, {tuple(row.shape)}")
        forming = (pending.part, pending.bias, pending.norm_weight, pending.eps, pending.stream)
    return _gemv_rope_split_store_op(row.contiguous(), weight, bias, cos, sin, int(n_q),
                                     int(n_kv), *store, *forming)
