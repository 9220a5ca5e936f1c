"""v05's runner with the decode step captured as a graph, once per bucket of lanes, and replayed
afterwards: CUDA graphs on a GPU (every bucket at the first decode step), graphs.CpuGraph on a
CPU (each bucket at its first step). The graph holds the whole step, LM head and the sampler's
draw included, so a replay returns logits and each lane's token. Prefill stays eager and
dynamic; the graph reads v06's static inputs.

A step needs the lanes 0 .. (highest lane in use); the bucket is the smallest of 1, 2, 4, ... 32,
then every 32 lanes, up to the lane count, that covers them. Lanes are handed out lowest first,
so few running requests replay a small graph. GraphRunner keeps the graphs, one per bucket, each
captured by graphs.py's capture; GraphedRunner is the runner part that replays them."""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import torch

from torchlet.contract import BuildOption

from ..v06_static_buffers import LaneRunner
from .graphs import GraphCaptureError, capture


# Past this many lanes the buckets grow by it, not double: a batch of 130 pads to 160, not 256.
# Each bucket is one more graph to capture (0.1-0.6 s on an H200 at the first decode step), and
# the steps of a batch between two buckets run the larger one's rows: on nano-vllm's workload
# (docs/perf-notes.md), with the live requests moved down into the lowest lanes, doubling past
# 32 ran 15% more rows than steps of 32, and steps of 32 ran it 1.1% faster on an H100 (three
# runs each, alternated).
BUCKET_STEP = 32


def default_buckets(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, ... BUCKET_STEP, then every BUCKET_STEP lanes, below max_batch; then max_batch."""
    buckets, b = [], 1
    while b < max_batch:
        buckets.append(b)
        b = b * 2 if b < BUCKET_STEP else b + BUCKET_STEP
    return tuple(buckets) + (max_batch,)


class GraphRunner:
    """Captures fn once per batch-size bucket and replays it afterwards.

    `batch_buffers` are static tensors whose first dimension is the batch, at least the largest
    bucket long. For bucket b, fn receives the views buffer[:b], made once and kept, so replay
    sees the very tensors it captured. The caller writes a batch of n into the buffers in place,
    fills lanes n..b-1 with harmless padding, calls run(n), and reads the first n rows of the
    outputs. With enabled=False, run() calls fn eagerly on the same views (graphs off), or on
    the inputs it is given in place of the first buffers: an eager run's shapes are its own, so
    it may read less than a graph, whose shapes were fixed at capture.
    """

    def __init__(self, fn: Callable, batch_buffers: Sequence[torch.Tensor], *,
                 buckets: Sequence[int], constants=(), enabled: bool = True, warmup: int = 3):
        self.fn = fn
        self.buffers = tuple(batch_buffers)
        self.buckets = tuple(sorted(set(buckets)))
        too_short = [tuple(t.shape) for t in self.buffers if t.shape[0] < self.buckets[-1]]
        if too_short:
            raise GraphCaptureError(
                f"batch buffers {too_short} are shorter than the largest bucket {self.buckets[-1]}")
        self.constants = constants
        self.enabled = enabled
        self.warmup = warmup
        self.pool = torch.cuda.graph_pool_handle() if self.buffers[0].is_cuda else None
        self._views = {b: tuple(t[:b] for t in self.buffers) for b in self.buckets}
        self.graphs: dict[int, Any] = {}
        self._counts = {b: {"captures": 0, "replays": 0} for b in self.buckets}

    def bucket_for(self, batch: int) -> int:
        """The smallest bucket that holds `batch` rows."""
        for b in self.buckets:
            if b >= batch:
                return b
        raise GraphCaptureError(f"a batch of {batch} exceeds the largest bucket {self.buckets[-1]}")

    def capture(self, bucket: int) -> None:
        self.graphs[bucket] = capture(self.fn, self._views[bucket], constants=self.constants,
                                      pool=self.pool, warmup=self.warmup)
        self._counts[bucket]["captures"] += 1

    def capture_all(self) -> None:
        """Capture every bucket now, largest first, so smaller graphs reuse the shared pool."""
        for b in reversed(self.buckets):
            if b not in self.graphs:
                self.capture(b)

    def run(self, batch: int, inputs: Sequence[torch.Tensor] = ()):
        """fn's outputs for the bucket of `batch` (bucket-sized: slice the first `batch` rows).
        An eager run reads `inputs` (their first rows) in place of as many first buffers."""
        bucket = self.bucket_for(batch)
        if not self.enabled:
            views = tuple(t[:bucket] for t in inputs) + self._views[bucket][len(inputs):]
            with torch.no_grad():
                return self.fn(*views)
        if bucket not in self.graphs:
            if self.buffers[0].is_cuda:
                # A CUDA capture takes 0.1-0.6 s on an H200 (its warm-up runs compile kernels for
                # the new shapes): every bucket at the first one, as serving engines capture at
                # start-up, so that no capture stalls a busy step later. A capture computes
                # nothing, so the replay below gives this call's result.
                self.capture_all()
            else:
                # The CPU stand-in records by running fn: that run already is this call's result.
                self.capture(bucket)
                return self.graphs[bucket].outputs
        self._counts[bucket]["replays"] += 1
        return self.graphs[bucket].replay(*self._views[bucket])

    def stats(self) -> dict[int, dict[str, int]]:
        """Captures and replays per bucket."""
        return {b: dict(c) for b, c in self._counts.items()}


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
        indexes out a copy). Graphs off, the step reads what the write returns, which may be
        less than the whole buffers a graph reads."""
        written = self.inputs.write(requests)
        in_use = self.kv.lanes_in_use()
        graphs = self.graphs[self.sampler.variant(in_use, requests)]
        logits, drawn = graphs.run(max(in_use) + 1 if in_use else 1, written)
        for request in requests:
            request.computed += 1
        return logits, drawn

    def decode_tokens(self, requests: Sequence) -> torch.Tensor:
        """The tokens the graph drew, in the requests' order."""
        _, drawn = self.step_lanes(requests)
        return self.lane_rows(drawn)

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
