"""v10_triton_paged_gqa (TEMPORARY package file: the lead replaces it with the full version,
keeping these exports): a Triton paged decode-attention kernel and a Triton KV store kernel."""
from torchlet.contract import TRITON_PAGED

from . import paged_kernels

CAPABILITIES = (TRITON_PAGED,)

__all__ = ["CAPABILITIES", "paged_kernels"]
