"""v03's request, which now also carries its decode lane, held while it runs."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..v04_continuous_batching import Request


@dataclass
class LaneRequest(Request):
    lane: int | None = field(default=None, repr=False, compare=False)  # set by the K/V memory
