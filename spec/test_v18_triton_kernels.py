"""v18's GPU products (implementations/v18_quantized_weights/gpu_kernels.py): x [M, K] times a
QuantizedTensor, read as stored and dequantized in registers.

What it introduces: two Triton kernels, a gemv for up to GEMV_MAX_M rows that reads each weight
byte once for all of them, and a matmul that dequantizes a tile in registers for tl.dot; one
torch op a launch, so a CUDA graph captures them.

Why the previous version needs it: v17's batch-1 step reads every weight in bf16; int8 halves
those bytes and int4 quarters them, which only pays if the product reads them as stored.

Core principle: a product with integer weights equals the float64 product with the weights
dequantized (QuantizedTensor.dequantize, gguf's reference rounding), within the house tolerance
of x's dtype (spec/support/oracles/tolerances.py), for every format the contract stores: GGUF's
Q8_0, Q4_0 and Q4_1, int8 per output channel, and int4 in groups of 32, 64 and 128 with zero
points; and for both kernels at every M (the CUDA-core gemv and the tensor-core matmul), so
each is checked past the row count where `linear` hands over to the other. Shapes are odd on
purpose: N = 37 leaves a partial block of weight rows, M = 3 and 20 partial blocks of x's rows,
K = 160 a partial K step and a split of K (gemv, under the interpreter) that does not divide
evenly.

On CPU the kernels run in float32 under TRITON_INTERPRET=1 (spec/support/inputs/kernel_targets.py);
on a GPU compiled, in float32, float16 and bfloat16, and once more inside a CUDA graph.
The weights are drawn at random (every byte a valid pair of nibbles, random zero points, mins
and scales), never quantized from a matrix: a wrong nibble order, group index or zero point's
sign then moves the product far past the tolerance.

Files: implementations/v18_quantized_weights/gpu_kernels.py against
implementations/v13_fused/gemv.py.

Tradeoff left visible: unpacking costs instructions that bf16's reads do not, so the matmul at
large batches was slower than cuBLAS's bf16 in its one H200 run (docs/gpu.md).
"""
from __future__ import annotations

import zlib

import pytest
import torch

from spec.support.inputs.kernel_targets import TARGETS, Target
from spec.support.oracles.tolerances import assert_close
from torchlet.contract import QUANTIZED_WEIGHTS, QuantizedTensor

pytestmark = pytest.mark.spec(needs=QUANTIZED_WEIGHTS, kernels=True)


@pytest.fixture
def gpu_kernels(impl):
    """The version's gpu_kernels module (its package exports it)."""
    return impl.package.gpu_kernels

# name: (bits, group (None: one group per row, i.e. per output channel), zeros, mins)
FORMATS = {
    "Q8_0": (8, 32, None, False),
    "Q4_0": (4, 32, "eight", False),
    "Q4_1": (4, 32, None, True),
    "int8": (8, None, None, False),
    "int4_g32": (4, 32, "random", False),
    "int4_g64": (4, 64, "random", False),
    "int4_g128": (4, 128, "random", False),
}
N = 37
# K = 256 only where 64 and 160 leave a format untested: groups of 128, and several of 64
CASES = [(fmt, k) for fmt in FORMATS for k in (64, 160, 256)
         if (FORMATS[fmt][1] is None or k % FORMATS[fmt][1] == 0)
         and (k != 256 or fmt in ("int4_g64", "int4_g128"))]
TARGETS_HALF = TARGETS + [pytest.param(Target("cuda", torch.float16), id="cuda-float16",
                                       marks=pytest.mark.gpu)]


def random_weight(fmt: str, n: int, k: int, gen: torch.Generator, device) -> QuantizedTensor:
    bits, group, zeros, mins = FORMATS[fmt]
    group = group or k
    if bits == 8:
        q = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8)
    else:
        q = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    groups = (n, k // group)
    # A checkpoint's scales: a row's largest weight (0.1-0.6) over the largest integer (127 or
    # 15). Far larger ones make sums whose bf16-rounded weights (the matmul's, as cuBLAS on a
    # bf16 copy) err past bf16's absolute tolerance near zero.
    top = 127 if bits == 8 else 15
    scales = ((torch.rand(groups, generator=gen) * 0.5 + 0.1) / top).half()
    z = None
    if zeros == "eight":
        z = torch.full(groups, 8, dtype=torch.uint8)
    elif zeros == "random":
        z = torch.randint(0, 16, groups, generator=gen, dtype=torch.uint8)
    m = (torch.randn(groups, generator=gen) * 0.1).half() if mins else None
    return QuantizedTensor(bits, q, scales, group, z, m, name=fmt).to(device)


def reference(x, w: QuantizedTensor, bias):
    out = x.double() @ w.dequantize().double().T
    return out if bias is None else out + bias.double()


@pytest.mark.parametrize("target", TARGETS_HALF)
@pytest.mark.parametrize("fmt,k", CASES)
@pytest.mark.parametrize("m", [1, 3, 20])
def test_both_kernels_equal_the_float64_product_of_the_dequantized_weights(gpu_kernels, target, fmt, k, m):
    # crc32, not hash(): str hashes are salted per process, and a spec draws the same weights
    # every run
    gen = torch.Generator().manual_seed(zlib.crc32(f"{fmt} {k} {m}".encode()))
    w = random_weight(fmt, N, k, gen, target.device)
    x = target.randn(gen, m, k)
    bias = target.randn(gen, N) if m == 3 else None   # one row count with a bias
    expected = reference(x, w, bias)
    for kernel in (gpu_kernels.gemv, gpu_kernels.matmul):
        out = kernel(x, w, bias)
        assert out.dtype == x.dtype and out.shape == (m, N)
        assert_close(out, expected, f"{kernel.__name__} {fmt} M={m} K={k}")


@pytest.mark.parametrize("target", TARGETS)
def test_linear_takes_the_gemv_up_to_gemv_max_m_rows_and_the_matmul_past_them(gpu_kernels, target):
    gen = torch.Generator().manual_seed(3)
    w = random_weight("int4_g32", N, 64, gen, target.device)
    for m in (gpu_kernels.GEMV_MAX_M, gpu_kernels.GEMV_MAX_M + 1):
        x = target.randn(gen, m, 64)
        chosen = gpu_kernels.gemv if m <= gpu_kernels.GEMV_MAX_M else gpu_kernels.matmul
        assert torch.equal(gpu_kernels.linear(x, w), chosen(x, w))


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["int8", "Q4_1", "int4_g64"])
def test_linear_replays_in_a_cuda_graph(gpu_kernels, fmt):
    """One op per launch, no host sync, no allocation outside the graph's pool: captured once,
    a replay on new x equals an eager call."""
    gen = torch.Generator().manual_seed(7)
    w = random_weight(fmt, 300, 1024, gen, "cuda")
    for m in (1, 5, 64):
        x = torch.randn(m, 1024, generator=gen).to("cuda", torch.bfloat16)
        gpu_kernels.linear(x, w)  # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = gpu_kernels.linear(x, w)
        x.copy_(torch.randn(m, 1024, generator=gen).to("cuda", torch.bfloat16))
        graph.replay()
        torch.testing.assert_close(out, gpu_kernels.linear(x, w), rtol=0, atol=0)


def test_wrong_inputs_are_refused(gpu_kernels):
    w = random_weight("Q4_1", 8, 64, torch.Generator().manual_seed(1), "cpu")
    with pytest.raises(ValueError, match="columns"):
        gpu_kernels.linear(torch.zeros(2, 32), w)
    with pytest.raises(ValueError, match="QuantizedTensor"):
        gpu_kernels.linear(torch.zeros(2, 64), torch.zeros(8, 64))
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        gpu_kernels.linear(torch.zeros(2, 64, dtype=torch.int32), w)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fmt", ["int8", "Q4_1", "int4_g64"])
def test_under_fake_tensors_each_kernel_promises_what_it_returns(gpu_kernels, target, fmt):
    """The ops' shapes-only twins (what a graph recorder or torch.compile sees) give the real
    launch's shape and dtype."""
    from dataclasses import replace

    from torch._subclasses.fake_tensor import FakeTensorMode

    here = target
    gen = torch.Generator().manual_seed(5)
    w = random_weight(fmt, 37, 64, gen, here.device)
    x = torch.randn(3, 64, generator=gen).to(here.device, here.dtype)
    bias = torch.randn(37, generator=gen).to(here.device, here.dtype)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake_w = replace(w, **{k: mode.from_tensor(getattr(w, k)) for k in
                               ("q", "scales", "zeros", "mins") if getattr(w, k) is not None})
        promised = [kernel(mode.from_tensor(x), fake_w, mode.from_tensor(bias))
                    for kernel in (gpu_kernels.gemv, gpu_kernels.matmul)]
    for kernel, fake in zip((gpu_kernels.gemv, gpu_kernels.matmul), promised):
        got = kernel(x, w, bias)
        assert (tuple(fake.shape), fake.dtype) == (tuple(got.shape), got.dtype)
