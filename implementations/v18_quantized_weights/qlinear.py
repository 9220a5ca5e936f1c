"""The quantized matrix product, y = x @ w.T (+ bias) with w a QuantizedTensor read as stored:
on a CPU the C++ kernels (cpu_kernels.py), on a GPU the Triton ones (gpu_kernels.py). Where
neither runs (a CPU whose extension did not build), the product of the dequantized matrix
(reference): the same numbers, none of the speed."""
from __future__ import annotations

import torch

from torchlet.contract import QuantizedTensor


def reference(x: torch.Tensor, w: QuantizedTensor, bias: torch.Tensor | None = None):
    return torch.nn.functional.linear(x, w.dequantize().to(x.dtype), bias)


def linear(x: torch.Tensor, w: QuantizedTensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    try:
        if x.is_cuda:
            from . import gpu_kernels as chosen
        else:
            from . import cpu_kernels as chosen
    except ImportError:  # until the kernels land
        return reference(x, w, bias)
    return chosen.linear(x, w, bias)
