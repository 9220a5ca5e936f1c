"""v05's request under paged K/V. Its block table is not on it: the pool keeps the one table of
each request (a pool may share and count blocks across requests), and a reader asks the K/V
memory for it (kv.block_table); a copy here had to be set and cleared in step with the pool."""
from __future__ import annotations

from dataclasses import dataclass

from ..v07_cuda_graph import LaneRequest


@dataclass
class PagedRequest(LaneRequest):
    """v05's request: the recipe's request part from here on, kept for the later requests that derive
    from it."""
