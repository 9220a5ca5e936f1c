"""Where the Triton kernel specs run: float32 under the interpreter on CPU (it has no bf16), and
compiled on a CUDA GPU in float32 and bfloat16. Each target is a pytest param with its marks."""
from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@dataclass(frozen=True)
class Target:
    device: str
    dtype: torch.dtype

    @property
    def on_gpu(self) -> bool:
        return self.device == "cuda"

    def randn(self, gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
        """Seeded normal data, drawn on CPU in float32 so every target sees the same values."""
        return (torch.randn(*shape, generator=gen) * scale).to(self.device, self.dtype)


TARGETS = [
    pytest.param(Target("cpu", torch.float32), id="cpu-float32",
                 marks=[pytest.mark.spec(kernels=True),
                        pytest.mark.skipif(not INTERPRETED,
                                           reason="CPU kernels need TRITON_INTERPRET=1")]),
    pytest.param(Target("cuda", torch.float32), id="cuda-float32", marks=pytest.mark.gpu),
    pytest.param(Target("cuda", torch.bfloat16), id="cuda-bfloat16", marks=pytest.mark.gpu),
]

GPU_TARGETS = [p for p in TARGETS if p.values[0].on_gpu]


def interpreted(spec):
    """Marks an engine spec that needs the kernels to run on CPU: under the interpreter, and
    only for the versions that write them (spec/support/collection/rule.py)."""
    skip = pytest.mark.skipif(not INTERPRETED, reason="CPU kernels need TRITON_INTERPRET=1")
    return pytest.mark.spec(kernels=True)(skip(spec))
