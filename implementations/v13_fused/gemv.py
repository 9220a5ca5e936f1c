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

Where it is not used (FusedOps.takes_gemv): at more than one row, and for a matrix of more than
GEMV_MAX_N weight rows (gate/up's 9,728, the LM head's 151,936), whose many tiles cuBLAS already
reads about as fast (7.2 against 7.4 us for gate/up). At 4 and 16 rows the tensor-core variants
of this kernel gained under 1% of a step, and down lost.

Sums in float32, the output rounded once to the model dtype (the bias added first), as a GEMM's
epilogue does; the summation order differs from cuBLAS's, so results agree within the dtype's
tolerance, not bit for bit.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from torchlet.contract import fake_of, kernel_op

from ..v12_prefix_cache import kernels

check, check_tensor = kernels.check, kernels.check_tensor

GEMV_MAX_N = 4096  # weight rows; past this cuBLAS's tiles keep the GPU reading
SUM_BLOCK = 1024

_NS = __name__.replace(".", "_")


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, n, k, chunk, SWIGLU: tl.constexpr,
                 HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # the input row; its programs next to each other
    rows = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)  # weight rows
    lo = tl.program_id(2) * chunk  # this program's share of the k columns
    x_ptr += row * (2 * k if SWIGLU else k)
    hi = tl.minimum(lo + chunk, k)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        live = ks < hi
        if SWIGLU:
            gate = tl.load(x_ptr + ks, mask=live, other=0.0)
            up = tl.load(x_ptr + k + ks, mask=live, other=0.0)
            g = gate.to(tl.float32)
            silu = (g * tl.sigmoid(g)).to(gate.dtype)  # rounded as swiglu_packed rounds it
            a = (silu.to(tl.float32) * up.to(tl.float32)).to(gate.dtype).to(tl.float32)
        else:
            a = tl.load(x_ptr + ks, mask=live, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + rows[:, None] * k + ks[None, :],
                    mask=(rows[:, None] < n) & live[None, :], other=0.0)
        acc += tl.sum(w.to(tl.float32) * a[None, :], axis=1)
    if SPLIT > 1:  # a partial sum, in float32, to this share's row of the workspace
        tl.store(out_ptr + (tl.program_id(2) * tl.num_programs(0) + row) * n + rows, acc,
                 mask=rows < n)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + rows, mask=rows < n, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * n + rows, acc.to(out_ptr.dtype.element_ty), mask=rows < n)


@triton.jit
def _sum_splits_kernel(part_ptr, bias_ptr, out_ptr, n, total, SPLIT: tl.constexpr,
                       HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # of the rows' outputs, row-major
    live = offs < total
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for split in range(SPLIT):  # always in the same order: the same sums every call
        acc += tl.load(part_ptr + split * total + offs, mask=live, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs % n, mask=live, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=live)


def plan(n: int, k: int, on_gpu: bool) -> tuple[int, int, int]:
    """(BLOCK_N weight rows and BLOCK_K columns a program reads at a time, programs k is split
    over). Measured on the H200 (docs/probes/gemv_variants.py, Qwen2.5-0.5B's shapes in
    bfloat16): blocks of 4 weight rows, so that even 896 of them keep every SM reading, in
    chunks of 512 columns; a k over 1,024 (down's 4,864) split so that no program walks more
    than ~1,024 columns, one load after another. Under the interpreter, which runs programs one
    after another, a few large ones, and a k over 256 split in two so the specs see the split."""
    if not on_gpu:
        return min(triton.next_power_of_2(n), 128), min(triton.next_power_of_2(k), 128), 1 + (k > 256)
    return 4, 512, triton.cdiv(k, 1024)


@kernel_op(f"{_NS}::gemv")
def _gemv_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
             swiglu: bool) -> torch.Tensor:
    n, k = weight.shape
    m = x.shape[0]
    out = x.new_empty(m, n)
    if n == 0 or m == 0:
        return out
    block_n, block_k, split = plan(n, k, x.is_cuda)
    chunk = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    split = triton.cdiv(k, chunk)
    part = out if split == 1 else torch.empty(split, m, n, device=x.device, dtype=torch.float32)
    bias_or_any = bias if bias is not None else weight
    _gemv_kernel[(m, triton.cdiv(n, block_n), split)](
        x, weight, bias_or_any, part, n, k, chunk, SWIGLU=swiglu, HAS_BIAS=bias is not None,
        SPLIT=split, BLOCK_N=block_n, BLOCK_K=block_k)
    if split > 1:
        _sum_splits_kernel[(triton.cdiv(m * n, SUM_BLOCK),)](
            part, bias_or_any, out, n, m * n, SPLIT=split, HAS_BIAS=bias is not None,
            BLOCK=SUM_BLOCK)
    return out


@fake_of(_gemv_op)
def _(x, weight, bias, swiglu):
    return x.new_empty(x.shape[0], weight.shape[0])


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         swiglu: bool = False) -> torch.Tensor:
    """x [m, k] @ weight [n, k].T (+ bias [n]) -> [m, n], each row summed as a lone row is
    (one row is what a decode step gives it; more, a batch-invariant product). With swiglu, x is
    [m, 2k], rows [gate | up], and the product is silu(gate) * up @ weight.T."""
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
    return _gemv_op(x.contiguous(), weight, bias, bool(swiglu))  # the kernel steps rows by k
