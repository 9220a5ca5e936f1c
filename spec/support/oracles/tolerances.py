"""How close a kernel's output must be to its reference, keyed by the dtype the kernel ran in.
The one place these numbers live: a spec never writes its own atol/rtol.

References compute in float64 from the same (already rounded) inputs, so a tolerance bounds the
kernel's own error: float32 is a few ulps of accumulated error; bfloat16 (8 significant bits) is
one or two roundings of the output, and in attention the probabilities rounded before P @ V."""
from __future__ import annotations

import torch

TOLERANCES = {
    torch.float32: dict(atol=2e-5, rtol=2e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=2e-2, rtol=2e-2),
}


def tolerance(dtype: torch.dtype) -> dict:
    return TOLERANCES[dtype]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str = "output") -> None:
    """actual (from a kernel, in its own dtype) against expected (any float dtype)."""
    torch.testing.assert_close(
        actual.double().cpu(), expected.double().cpu(), **tolerance(actual.dtype),
        msg=lambda m: f"{what} ({actual.dtype}) differs from the reference: {m}")
