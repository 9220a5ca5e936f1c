"""v09_triton_basics (TEMPORARY package file: the lead replaces it with the full version, keeping
these exports): Triton kernels for RMSNorm, fused residual-add + RMSNorm, RoPE and SwiGLU."""
from torchlet.contract import TRITON_BASICS

from . import kernels

CAPABILITIES = (TRITON_BASICS,)

__all__ = ["CAPABILITIES", "kernels"]
