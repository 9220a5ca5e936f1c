"""v06's engine over the graphed runner; it adds graph_stats() to the contract."""
from __future__ import annotations

import torch

from torchlet.contract import BuildOption, Checkpoint

from ..v06_static_buffers import (SLOT_OPTIONS, StaticEngine, refuse_unknown_options, slot_limits,
                                  slot_scheduler)
from .runner import GraphedRunner


class GraphEngine(StaticEngine):
    def graph_stats(self) -> dict[int, dict[str, int]]:
        """Per bucket of decode lanes: how many times it was captured and replayed."""
        return self.runner.graphs.stats()


# The options build names: v06's and its own.
GRAPH_OPTIONS = SLOT_OPTIONS + (
    BuildOption("use_graphs", bool, True, "capture the decode step once per bucket of lanes and "
                "replay it; False runs the same step eagerly"),
)


def build(checkpoint: Checkpoint, *, device="cpu", dtype=torch.float32,
          max_decode_slots: int | None = None, max_running: int | None = None,
          max_step_tokens: int | None = None, max_model_len: int | None = None,
          poison_inactive_lanes: bool = False,
          use_graphs: bool = True, **options):
    """v06's options, checked the same way (slot_limits), and use_graphs: False runs the same
    decode step eagerly."""
    refuse_unknown_options("v07", GRAPH_OPTIONS, options)
    slots, budget = slot_limits(checkpoint, max_decode_slots, max_running, max_step_tokens,
                                max_model_len)
    runner = GraphedRunner(checkpoint, device, dtype, max_model_len, slots,
                           poison_inactive_lanes, use_graphs)
    return GraphEngine(runner, slot_scheduler(slots, budget))
