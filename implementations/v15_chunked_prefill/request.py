"""v05's request, which now also knows how far its prefill must go: a prompt is computed over
several steps, and the request samples only once its K/V holds all of it."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..v14_overlap import LaneRequest


@dataclass
class ChunkedRequest(LaneRequest):
    # The length its K/V must reach before it samples: its whole sequence when it was admitted
    # (its prompt; after a preemption, its prompt and tokens, recomputed). computed counts up to
    # it a slice at a time.
    prefill_to: int = field(default=0, repr=False, compare=False)

    @property
    def prefilling(self) -> bool:
        """Whether rows of its admitted sequence are still to be computed: it takes a slice of
        the step's budget, not a decode row."""
        return self.computed < self.prefill_to
