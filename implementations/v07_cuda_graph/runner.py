"""v05's runner with the decode step captured as a graph, once per bucket of lanes, and replayed
afterwards: CUDA graphs on a GPU (every bucket at the first decode step), graphs.CpuGraph on a
CPU (each bucket at its first step). The graph holds the whole step, LM head and the sampler's
draw included, so a replay returns logits and each lane's token. Prefill stays eager and
dynamic; the graph reads v06's static inputs.

A step needs the lanes 0 .. (highest lane in use); the bucket is the smallest of 1, 2, 4, ... up
to the lane count that covers them. Lanes are handed out lowest first, so few running requests
replay a small graph."""
from __future__ import annotations

from functools import partial
from typing import Sequence

import torch

from torchlet.contract import BuildOption

from ..v06_static_buffers import LaneRunner
from .graphs import GraphRunner, default_buckets


class GraphedRunner(LaneRunner):
    OPTIONS = (
        BuildOption("use_graphs", bool, True, "capture the decode step once per bucket of lanes "
                    "and replay it; False runs the same step eagerly"),
    )
    SERVES = ("graph_stats",)  # the graph_replay capability, served on the engine

    def __init__(self, *parts, use_graphs: bool = True):
        """LaneRunner's parts; use_graphs=False runs the same step eagerly. One set of graphs
        per way the sampler may draw (its variants)."""
        super().__init__(*parts)
        self.use_graphs = use_graphs
        self.graphs = {variant: self.make_graphs(variant) for variant in self.sampler.variants}

    @classmethod
    def assemble(cls, a) -> "GraphedRunner":
        return cls(a.checkpoint, a.device, a.dtype, a.model, a.kv, a.inputs, a.sampler,
                   use_graphs=a.options["use_graphs"])

    def make_graphs(self, variant: str) -> GraphRunner:
        """Graphs of the step that draws as `variant` says, over the static inputs and the
        sampler's lane settings, one per bucket of lanes."""
        inputs = self.inputs.tensors + self.sampler.lane_tensors(variant)
        return GraphRunner(partial(self.captured_step, variant), inputs,
                           buckets=default_buckets(self.kv.num_lanes),
                           constants=(self.weights, self.kv.kv), enabled=self.use_graphs)

    def captured_step(self, variant: str, *tensors: torch.Tensor):
        """What a graph holds: v05's eager decode step over these lanes, to float logits, then
        each lane's draw for the token after its fed one (position + 1)."""
        n = len(self.inputs.tensors)
        logits = self.decode_step(*tensors[:n])
        return logits, self.sampler.draw_lanes(variant, logits, tensors[1] + 1, *tensors[n:])

    @torch.inference_mode()
    def step_lanes(self, requests: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the lanes, replay the bucket that covers the lanes in use: logits and draws by
        lane, in the graph's output tensors, which the next replay overwrites (lane_rows
        indexes out a copy)."""
        self.inputs.write(requests)
        in_use = self.kv.lanes_in_use()
        graphs = self.graphs[self.sampler.variant(in_use)]
        logits, drawn = graphs.run(max(in_use) + 1 if in_use else 1)
        for request in requests:
            request.computed += 1
        return logits, drawn

    def decode_tokens(self, requests: Sequence) -> torch.Tensor:
        """The tokens the graph drew, in the requests' order."""
        _, drawn = self.step_lanes(requests)
        return self.lane_rows(drawn, requests)

    def graph_stats(self) -> dict[int, dict[str, int]]:
        """Per bucket of decode lanes: how many times it was captured and replayed, over every
        set of graphs."""
        stats: dict[int, dict[str, int]] = {}
        for graphs in self.graphs.values():
            for bucket, counts in graphs.stats().items():
                total = stats.setdefault(bucket, dict.fromkeys(counts, 0))
                for name, n in counts.items():
                    total[name] += n
        return stats
