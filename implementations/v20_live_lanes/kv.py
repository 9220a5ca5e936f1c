"""v17's K/V memory, whose requests move down into free lanes where that shrinks the pass. v07's
graph bucket covers lanes 0 .. the highest lane in use, and a lane was a request's for life, so
one request left in lane 200 of 256 kept every step at 256 rows. Now, before a pass feeds the
lanes of its requests (grow, which every decode step and verifying pass calls first), if the
bucket that covers the highest lane in use is larger than the one that covers the number of
requests holding lanes, the requests in the lanes at or past that number move into the free
lanes below it. Since v08 a request's K/V lives in its blocks, and its lane holds only its row
of a decode step's inputs (token, position, block table) and of the sampler's settings: moving a
request moves that row, never its K/V. v08's inputs write each request's row where its lane now
is; the sampler (sampler.py) writes a moved request's settings into its new lane before it
reads them.

A lane frees when its request finishes or is aborted, as before; the move waits for the next
pass, so between two steps lane_of() may show the hole, and the rows a decode launched ahead
(v14) left by lane are read where they were computed."""
from __future__ import annotations

from typing import Sequence

from ..v19_structured_output import SpeculativeKV, default_buckets


class LiveKV(SpeculativeKV):
    def __init__(self, *args, **options):
        super().__init__(*args, **options)
        # v07's buckets (the runner's graphs): a move is worth its cost (the sampler writes the
        # moved requests' settings again) only where it lets a pass run a smaller one
        self.buckets = default_buckets(self.num_lanes)

    def grow(self, requests: Sequence) -> None:
        """v08's room for each request's next token, once the requests holding lanes fit the
        smallest bucket that holds their number."""
        lanes = self.lanes_in_use()
        if lanes and self.bucket(max(lanes) + 1) > self.bucket(len(lanes)):
            self.compact()
        super().grow(requests)

    def bucket(self, lanes: int) -> int:
        return next(b for b in self.buckets if b >= lanes)

    def compact(self) -> None:
        """Move every request whose lane is at or past the number of requests holding lanes
        into the free lanes below that number, the lowest lane first (its K/V stays in its
        blocks; the sampler finds the move itself, sampler.py)."""
        live = len(self.held)
        above = sorted((r for r in self.held.values() if r.lane >= live), key=lambda r: r.lane)
        taken = {r.lane for r in self.held.values()}
        holes = (lane for lane in range(live) if lane not in taken)
        for request, lane in zip(above, holes, strict=False):
            request.lane = lane
