"""v03's greedy sampler, told when requests take decode lanes: a sampler that keeps settings per
lane (a temperature, a seed) writes them then."""
from __future__ import annotations

from ..v04_continuous_batching import Greedy


class LaneGreedy(Greedy):
    def bind(self, requests) -> None:
        """The requests have just taken their lanes: the argmax keeps nothing per lane."""
        assert all(r.lane is not None for r in requests), "bound before its lane was taken"
