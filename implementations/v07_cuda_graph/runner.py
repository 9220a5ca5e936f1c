"""v06's runner with the decode step captured as a graph, once per bucket of lanes, and replayed
afterwards: CUDA graphs on a GPU (every bucket at the first decode step), graphs.CpuGraph on a
CPU (each bucket at its first step). The graph holds the whole step, LM head included, so a
replay returns logits. Prefill stays eager and dynamic.

A step needs the lanes 0 .. (highest slot in use); the bucket is the smallest of 1, 2, 4, ... up
to the slot count that covers them. Slots are handed out lowest first, so few running requests
replay a small graph."""
from __future__ import annotations

import torch

from torchlet.contract import Checkpoint

from ..v06_static_buffers import StaticRunner
from .graphs import GraphRunner, default_buckets


class GraphedRunner(StaticRunner):
    def __init__(self, checkpoint: Checkpoint, device="cpu", dtype=torch.float32,
                 max_len: int | None = None,
                 num_slots: int = 8, poison_inactive_lanes: bool = False, use_graphs: bool = True,
                 **options):
        """StaticRunner's arguments, and use_graphs=False to run the same step eagerly."""
        super().__init__(checkpoint, device, dtype, max_len, num_slots, poison_inactive_lanes,
                         **options)
        self.use_graphs = use_graphs
        self.graphs = self.make_graphs(self.captured_step)

    def make_graphs(self, step, inputs=None) -> GraphRunner:
        """Graphs of `step` over `inputs` (the decode buffers unless given), one per bucket of
        lanes."""
        inputs = self.buffers.tensors if inputs is None else inputs
        return GraphRunner(step, inputs, buckets=default_buckets(self.num_slots),
                           constants=(self.weights, self.cache.kv), enabled=self.use_graphs)

    def captured_step(self, *buffers) -> torch.Tensor:
        """What a graph holds: v06's eager decode step over these lanes, to float logits."""
        return super().decode_step(*buffers)

    def lanes_in_use(self) -> list[int]:
        """The lanes of the requests running now: a step's bucket must cover them."""
        return self.cache.slots_in_use()

    def decode_step(self, *buffers) -> torch.Tensor:
        """Replay the bucket that covers the lanes in use; float logits [bucket, vocab] in the
        graph's output tensor, which the next replay overwrites (decode() indexes out a copy).
        The inputs are the static buffers, already written."""
        in_use = self.lanes_in_use()
        return self.step_graphs().run(max(in_use) + 1 if in_use else 1)

    def step_graphs(self) -> GraphRunner:
        """The graphs this step replays: the one set here."""
        return self.graphs
