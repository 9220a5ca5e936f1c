"""The quantized matrix product, y = x @ w.T (+ bias) with w a QuantizedTensor read as stored:
on a CPU the C++ kernels (cpu_kernels.py, which fall back to the dequantized matrix's product
where the extension cannot build), on a GPU the Triton ones (gpu_kernels.py)."""
from __future__ import annotations

import torch

from torchlet.contract import QuantizedTensor

from . import cpu_kernels, gpu_kernels


def linear(x: torch.Tensor, w: QuantizedTensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return (gpu_kernels if x.is_cuda else cpu_kernels).linear(x, w, bias)
