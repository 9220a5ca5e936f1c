"""v18's CPU matrix product: x @ w.T read from the integers a QuantizedTensor stores.

What it introduces: torchlet_q::linear, a C++ op (built by setup.sh through
torch.utils.cpp_extension) that reads each weight row once for up to 32 rows of x and
dequantizes in registers; more rows dequantize the whole matrix (in blocks of rows past 16 MB)
into a float32 GEMM.

Why the previous version needs it: v17's CPU products read float32, 4 bytes a weight; torch's
packed int8 and int4 kernels were slower than float32 at batch 1 on this CPU (issue 46).

Core principle: for every weight format the default model and v18 use (GGUF's Q8_0, Q4_0 and
Q4_1; int8 per output channel; int4 in groups of 32, 64 and 128 with zero points), on shapes that
are nobody's fast path (37 output rows, 1 to 5 groups a row, 1 to 70 rows of x, so both the
register kernel of small batches and the dequantize-then-GEMM path of prompts run), the product
equals the float64 product of the dequantized matrix within float32 rounding.

The tolerance: the kernel dequantizes every weight bit for bit as QuantizedTensor.dequantize
does (the same integer difference, product and sum, no fused multiply-add), so what is left is
the float32 sum of K products, in any order off by at most K * 2^-24 * sum_k |x_k w_k| (the
standard bound gamma_K), plus one rounding for the bias and one for an 8-bit group's scale
(applied to the group's sum, not to each weight). The bound is (K + 2) * 2^-24 *
(sum_k |x_k w_k| + |bias|), entry by entry. A wrong nibble, group, sign or scale changes an
entry by a sizeable part of sum_k |x_k w_k|, thousands of times the bound.

Files: implementations/v18_quantized_weights/csrc/qlinear.cpp (the kernel),
implementations/v18_quantized_weights/cpu_kernels.py (its build and fallback).

Tradeoff left visible: activations stay float32 (the logits must be a float64 engine's on the
dequantized weights), so the kernel does float arithmetic on every weight where llama.cpp's
integer dot products on int8 activations do less; without a compiler it falls back to the
dequantized product, the same numbers at float speed.
"""
from __future__ import annotations

import shutil

import pytest
import torch

from torchlet.contract import QUANTIZED_WEIGHTS, QuantizedTensor

N = 37  # not a multiple of the 2 or 4 rows the kernel reads at a time, nor of a thread's share
ROWS_OF_X = (1, 3, 9, 17, 32, 33, 70)  # 9, 17: tiles of 8 then 1; 32: the last that the register
#                                        kernel takes; 33 up: dequantize-then-GEMM


pytestmark = pytest.mark.spec(needs=QUANTIZED_WEIGHTS)


@pytest.fixture
def cpu_kernels(impl):
    """The version's cpu_kernels module (its package exports it)."""
    return impl.package.cpu_kernels


def random_matrix(gen, bits, group, cols, zeros=None, mins=False):
    """A QuantizedTensor of N rows with random integers, scales (both signs), zeros and mins.
    zeros: None, an int for every group (Q4_0's 8), or "random"."""
    groups = cols // group
    if bits == 8:
        q = torch.randint(-128, 128, (N, cols), generator=gen, dtype=torch.int8)
    else:  # every byte value, so a run's low and high nibbles differ
        q = torch.randint(0, 256, (N, cols // 2), generator=gen, dtype=torch.uint8)
    scales = (torch.randn(N, groups, generator=gen) * 0.02).half()
    if zeros == "random":
        zeros = torch.randint(0, 2 ** bits, (N, groups), generator=gen, dtype=torch.uint8)
    elif zeros is not None:
        zeros = torch.full((N, groups), zeros, dtype=torch.uint8)
    mins = (torch.randn(N, groups, generator=gen) * 0.1).half() if mins else None
    return QuantizedTensor(bits, q, scales, group, zeros, mins)


FORMATS = {  # name: (bits, group or None for one group a row, zeros, mins)
    "Q8_0": (8, 32, None, False),
    "Q4_0": (4, 32, 8, False),
    "Q4_1": (4, 32, None, True),
    "int8 per channel": (8, None, None, False),
    "int4 g32": (4, 32, "random", False),
    "int4 g64": (4, 64, "random", False),
    "int4 g128": (4, 128, "random", False),
    # no checkpoint's format, but the layout allows it: the 8-bit path with a zero and a min
    "int8 g32 zeros+mins": (8, 32, "random", True),
}


def check(y, x, w, bias):
    wd = w.dequantize().double()
    ref = x.double() @ wd.T + bias.double()
    bound = (x.shape[1] + 2) * 2.0 ** -24 * (x.double().abs() @ wd.abs().T + bias.double().abs())
    err = (y.double() - ref).abs()
    assert y.dtype == torch.float32 and y.shape == ref.shape
    assert (err <= bound).all(), f"worst error {(err / bound).max():.3g} x the float32 bound"


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_product_equals_the_float64_product_of_the_dequantized_weights(cpu_kernels, fmt):
    bits, group, zeros, mins = FORMATS[fmt]
    gen = torch.Generator().manual_seed(18)
    for runs in (1, 3, 5):  # K = 1, 3 and 5 groups (per channel: K = 32, 96, 160)
        cols = runs * (group or 32)
        w = random_matrix(gen, bits, group or cols, cols, zeros, mins)
        bias = torch.randn(N, generator=gen)
        for m in ROWS_OF_X:
            x = torch.randn(m, cols, generator=gen)
            check(cpu_kernels.linear(x, w, bias), x, w, bias)


def test_without_bias_and_with_leading_dimensions(cpu_kernels):
    gen = torch.Generator().manual_seed(7)
    w = random_matrix(gen, 4, 32, 96, mins=True)
    x = torch.randn(2, 3, 96, generator=gen)
    y = cpu_kernels.linear(x, w)
    assert y.shape == (2, 3, N)
    check(y.reshape(6, N), x.reshape(6, 96), w, torch.zeros(N))


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="no C++ compiler: linear falls back to F.linear on dequantized weights")
def test_the_extension_builds_and_runs_as_a_torch_op(cpu_kernels):
    assert cpu_kernels.available(), cpu_kernels.build_error
    gen = torch.Generator().manual_seed(1)
    w = random_matrix(gen, 8, 32, 64)
    x = torch.randn(1, 64, generator=gen)
    y = torch.ops.torchlet_q.linear(x, w.q, w.scales, None, None, 8, 32, None)
    check(y, x, w, torch.zeros(N))


def test_the_extension_is_built_under_the_torchlet_cache_and_registers_one_op(cpu_kernels,
                                                                               monkeypatch,
                                                                               tmp_path):
    """Where setup.sh's build goes (TORCHLET_CACHE_DIR moves it, as it moves the model cache),
    and a second build in a process that has the op loads nothing again: the op is registered
    once, whichever copy of the module (a mutant's tree) asked first."""
    monkeypatch.setenv("TORCHLET_CACHE_DIR", str(tmp_path))
    assert cpu_kernels.build_dir().parent == tmp_path / "extensions"
    if cpu_kernels.available():
        assert cpu_kernels.registered()
        assert cpu_kernels.build() and cpu_kernels.build_seconds == 0.0
