"""v05's request, which now also carries its block table: the pool's blocks that hold its K/V, in
logical order."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..v07_cuda_graph import LaneRequest


@dataclass
class PagedRequest(LaneRequest):
    # The pool's own table (it grows as the request does); set by the K/V memory.
    blocks: list[int] | None = field(default=None, repr=False, compare=False)
