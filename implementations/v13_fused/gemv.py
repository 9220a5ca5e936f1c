"""A batch-1 decode step's projections as one Triton kernel each (gemv): one row x [1, k] times
a weight matrix [n, k] that the step reads once.

At one row a projection does two flops per weight it reads, so its time is the time to read the
weights, and at this model's sizes (a few MB a matrix) most of that is the time to get every SM
reading. cuBLAS's kernels are tiled for many rows: on the H200 a q/k/v or o product of one row
takes 4.2-4.7 us for 1.6-2.1 MB, and down runs split over k, with a reducing launch after it
(docs/perf-notes.md). Here a program reads BLOCK_N whole weight rows in BLOCK_K-wide chunks and
sums each row's products in registers: 3.4 and 2.9 us. A long k (down's) is split over
programs, each storing a float32 partial sum; the last of a tile's programs to finish adds them
in a fixed order (add_up_splits), so the split costs no second launch: at batch 1 a step pays
for its launches more than for its bytes (257 launches of about 3.4 us against 0.9 us of bytes
each, docs/perf-notes.md), and the reducing launch was one of a layer's ten or eleven.

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

_NS = __name__.replace(".", "_")


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, bias_ptr, part_ptr, out_ptr, tiles_ptr, n, k, chunk,
                 SWIGLU: tl.constexpr,
                 HAS_BIAS: tl.constexpr, SPLIT: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)  # weight rows
    lo = tl.program_id(1) * chunk  # this program's share of the k columns
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
    if SPLIT > 1:  # a partial sum: the tile's last program adds them up
        add_up_splits(part_ptr, bias_ptr, out_ptr, tiles_ptr, tl.program_id(0),
                      tl.program_id(1), rows, rows < n, n, n, acc, SPLIT, HAS_BIAS)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + rows, mask=rows < n, other=0.0).to(tl.float32)
        tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=rows < n)


@triton.jit
def add_up_splits(part_ptr, bias_ptr, out_ptr, tiles_ptr, tile, split, offs, live, total, n,
                  acc, SPLIT: tl.constexpr, HAS_BIAS: tl.constexpr):
    """Where k is split over SPLIT programs: this program's (its tile's split `split`) float32
    partial sums `acc` of the outputs at `offs` (of `total`, n to a row) go to its share of the
    workspace part_ptr [SPLIT, total]; then it counts itself done on its tile's counter, and
    the program that comes last adds the tile's partial sums, always in split order (the same
    sums every call, whoever is last), with the bias, into out_ptr, and sets the counter back
    to 0 for the next launch (the counters: split_counters)."""
    tl.store(part_ptr + split * total + offs, acc, mask=live)
    tl.debug_barrier()  # every thread's partial sums stored before the count says they are
    arrived = tl.atomic_add(tiles_ptr + tile, 1, sem="acq_rel")  # releases them; acquires others'
    if arrived == SPLIT - 1:
        summed = tl.zeros(acc.shape, dtype=tl.float32)
        for s in range(SPLIT):  # ".cg": read from L2, where the other programs' stores are
            summed += tl.load(part_ptr + s * total + offs, mask=live, other=0.0,
                              cache_modifier=".cg")
        if HAS_BIAS:
            summed += tl.load(bias_ptr + offs % n, mask=live, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, summed.to(out_ptr.dtype.element_ty), mask=live)
        tl.atomic_xchg(tiles_ptr + tile, 0)


_COUNTERS: dict[torch.device, torch.Tensor] = {}


def split_counters(device: torch.device, tiles: int) -> torch.Tensor:
    """A counter for each of `tiles` tiles of a split launch, each 0: one int32 buffer per
    device, which every later launch reads (the program that finishes a tile sets its counter
    back to 0), so a captured step reads the same buffer at each replay and no launch clears
    it. The launches of a device run one after another in its stream, so they can share it. It
    grows only at a launch that needs more tiles than any before: an eager call, since every
    capture is preceded by warm-up runs of the same shapes."""
    counters = _COUNTERS.get(device)
    if counters is None or counters.numel() < tiles:
        counters = torch.zeros(max(tiles, 1024), device=device, dtype=torch.int32)
        _COUNTERS[device] = counters
    return counters


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
    out = x.new_empty(1, n)
    if n == 0:
        return out
    block_n, block_k, split = plan(n, k, x.is_cuda)
    chunk = triton.cdiv(triton.cdiv(k, split), block_k) * block_k
    split = triton.cdiv(k, chunk)
    part = out if split == 1 else torch.empty(split, n, device=x.device, dtype=torch.float32)
    tiles = triton.cdiv(n, block_n)
    _gemv_kernel[(tiles, split)](
        x, weight, bias if bias is not None else weight, part, out,
        split_counters(x.device, tiles), n, k, chunk, SWIGLU=swiglu, HAS_BIAS=bias is not None,
        SPLIT=split, BLOCK_N=block_n, BLOCK_K=block_k)
    return out


@fake_of(_gemv_op)
def _(x, weight, bias, swiglu):
    return x.new_empty(1, weight.shape[0])


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         swiglu: bool = False) -> torch.Tensor:
    """x [1, k] @ weight [n, k].T (+ bias [n]) -> [1, n]. With swiglu, x is [1, 2k] = [gate | up]
    and the product is silu(gate) * up @ weight.T."""
    check_tensor("x", x)
    check_tensor("weight", weight, like=x)
    check(x.dim() == 2 and weight.dim() == 2,
          f"x and weight must be matrices, got shapes {tuple(x.shape)} and {tuple(weight.shape)}")
    check(x.shape[0] == 1, f"gemv takes one row, got {x.shape[0]}")
    width = weight.shape[1] * (2 if swiglu else 1)
    check(x.shape[1] == width, f"x has {x.shape[1]} columns but the weight's rows need {width}"
                               + (" ([gate | up])" if swiglu else ""))
    if bias is not None:
        check_tensor("bias", bias, like=x)
        check(bias.shape == (weight.shape[0],),
              f"bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    return _gemv_op(x, weight, bias, bool(swiglu))
