"""A slice pass captured as a graph and replayed, as v07 replays the decode step.

Eager, a slice step is host-bound on a GPU: a budget of 512 rows of Qwen2.5-0.5B costs the host
about 16 ms to launch (some 170 Triton kernels and 100 torch ops, one by one) against about 7 ms
of GPU work (docs/perf-notes.md), and every running request's next token waits for it. A slice
pass has no host read once its inputs are on the device (v13's context attention plans its grid
from shapes and a bound on the contexts), so it can be captured, once per shape bucket:
- rows, padded to a power of two (at least 16): the padding rows are one more request, token 0
  at position 0 whose K/V goes to slot 0, the null block's (no table names it for a real
  token), and whose context is that slot again; they attend over it, so every value a pass
  computes is defined (uninitialized rows would carry whatever the memory held, NaN included);
- requests, padded to a power of two: a padding request has no rows and no context;
- the bound on the contexts, a power of two (at least 256).
A pass of more than MAX_ROWS rows runs eagerly (below).
Each bucket's graph holds its own inputs, one flat int64 tensor on the device written by one
copy a step: [token ids | positions | store slots | row indptr | context indptr | context
slots]. All share one memory pool, apart from the decode step's graphs (a decode launched ahead
still holds its output while a slice runs).

A capture stalls its step (20-60 ms on an H100, against a 4-8 ms step), so a bucket is not
captured at its first pass where a graph already captured covers it (as many rows or more, room
for the padding request, a context bound as long): the pass replays the smallest such graph,
padded further, and its bucket is captured only at its CAPTURE_AT-th pass. A shape that comes
once (a prompt's last slice) costs padding rows, not a stall; one that keeps coming gets its own
graph. Only a bucket that nothing captured covers stalls at its first pass."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np
import torch

from ..v14_overlap import PackedContext, graphs

SMALLEST_ROWS, SMALLEST_REQUESTS, SMALLEST_CONTEXT = 16, 4, 256
# A pass of more rows runs eagerly: its GPU work outlasts its launches (on the H200, 2,048 rows
# of Qwen2.5-0.5B take about as long on the GPU as the host takes to launch them), and a graph
# of it would hold that many rows' activations and cost a capture per shape for nothing. The
# nano-vllm workload's prefill steps (up to 16,384 rows) stay as v14 runs them.
MAX_ROWS = 2048
# A bucket's pass at which it is captured where a larger graph covers its earlier passes: the
# padding a covered pass computes (at most the covering graph's rows) costs less than a capture
# for a pass or two, more for every pass after (a 512-row pass is 4-8 ms of GPU work).
CAPTURE_AT = 3
# Each input starts at a multiple of this many int64s in the flat buffer: Triton specializes a
# kernel on its pointers' 16-byte alignment, and a view at an odd offset would compile anew.
ALIGN = 16


def bucket(n: int, smallest: int) -> int:
    """The power of two at least n and at least smallest."""
    return max(smallest, 1 << max(n - 1, 0).bit_length())


class SliceGraphs:
    """The slice passes of one runner's engine, by bucket (rows, requests, context bound): the
    runner hands over what a pass needs, the K/V memory (the requests' slots), the device, the
    pass itself (the runner's cached_pass over its weights and K/V) and the tensors it holds."""

    def __init__(self, kv, device: torch.device, cached_pass, constants: tuple):
        self.kv, self.device, self.cached_pass, self.constants = kv, device, cached_pass, constants
        self.graphs: dict[tuple[int, int, int], tuple] = {}
        self.passes: Counter[tuple[int, int, int]] = Counter()  # passes of each bucket so far
        self.pool = torch.cuda.graph_pool_handle() if device.type == "cuda" else None

    @staticmethod
    def key(rows: int, requests: int, longest: int) -> tuple[int, int, int]:
        """(rows, requests, context bound) of the graph for a pass of `rows` rows over
        `requests` requests whose longest context is `longest`, padding request included."""
        num_rows = bucket(rows, SMALLEST_ROWS)
        pad = num_rows - rows
        return (num_rows, bucket(requests + (pad > 0), SMALLEST_REQUESTS),
                bucket(max(longest, pad), SMALLEST_CONTEXT))

    @staticmethod
    def covers(key: tuple[int, int, int], rows: int, requests: int, longest: int) -> bool:
        """Whether the graph of bucket `key` can run a pass of `rows` rows over `requests`
        requests whose longest context is `longest`: the rows fit, a padding request fits beside
        them where rows are padded, and every context (the padding request's too) fits the
        bound."""
        num_rows, num_requests, bound = key
        pad = num_rows - rows
        return pad >= 0 and num_requests >= requests + (pad > 0) and bound >= max(longest, pad)

    def bucket_for(self, rows: int, requests: int, longest: int) -> tuple[int, int, int]:
        """The bucket a pass runs in: its own where captured, or at its CAPTURE_AT-th pass
        (captured then), or where no captured graph covers it (captured at once); else the
        smallest captured bucket that covers it."""
        own = self.key(rows, requests, longest)
        self.passes[own] += 1
        if own in self.graphs or self.passes[own] >= CAPTURE_AT:
            return own
        covering = [k for k in self.graphs if self.covers(k, rows, requests, longest)]
        return min(covering, default=own)

    def forward_rows(self, requests: Sequence, ends: Sequence[int]):
        """v12's forward_rows through the bucket's graph: hidden [T, hidden] (a view of the
        graph's output, which its next replay overwrites) and the pass's row indptr."""
        kv = self.kv
        starts = [r.computed for r in requests]
        contexts = [kv.slots(r.id, 0, end) for r, end in zip(requests, ends)]
        rows = [end - start for start, end in zip(starts, ends)]
        total = sum(rows)
        key = self.bucket_for(total, len(requests), max(ends))
        flat = np.zeros(self.size(key), np.int64)
        ids, positions, mapping, row_ptr, context_ptr, slots = self.views(flat, key)
        ids[:total] = [t for r, a, b in zip(requests, starts, ends) for t in r.sequence[a:b]]
        positions[:total] = [p for a, b in zip(starts, ends) for p in range(a, b)]
        mapping[:total] = [s for c, a in zip(contexts, starts) for s in c[a:]]
        # The padding request's rows and context: zeros already (token 0, position 0, slot 0).
        pad = [key[0] - total] if key[0] > total else []
        row_ptr[1:] = np.cumsum(rows + pad).tolist() + [key[0]] * (key[1] - len(rows + pad))
        context_ptr[1:] = (np.cumsum(list(ends) + pad).tolist()
                           + [sum(ends) + sum(pad)] * (key[1] - len(rows + pad)))
        slots[:sum(ends)] = [s for c in contexts for s in c]
        if key in self.graphs:
            device_flat, graph = self.graphs[key]
            device_flat.copy_(torch.from_numpy(flat), non_blocking=True)
        else:
            # Captured over this pass's inputs: its warm-up run computes this very pass (storing
            # the same K/V as the replay), never rows that no request covers.
            device_flat = torch.from_numpy(flat).to(self.device)
            graph = self.capture(key, device_flat)
        hidden = graph.replay()
        return hidden[:total], self.views(device_flat, key)[3][:len(requests) + 1]

    @staticmethod
    def lengths(key: tuple[int, int, int]) -> list[int]:
        num_rows, num_requests, bound = key
        return [num_rows] * 3 + [num_requests + 1] * 2 + [num_requests * bound]

    def size(self, key: tuple[int, int, int]) -> int:
        """The flat buffer's length: each input's, rounded up to ALIGN."""
        return sum(-(-n // ALIGN) * ALIGN for n in self.lengths(key))

    def views(self, flat, key: tuple[int, int, int]):
        """The six inputs' views of one flat buffer (numpy on the host, torch on the device),
        each starting at a multiple of ALIGN."""
        views, offset = [], 0
        for n in self.lengths(key):
            views.append(flat[offset:offset + n])
            offset += -(-n // ALIGN) * ALIGN
        return views

    def capture(self, key: tuple[int, int, int], device_flat: torch.Tensor):
        """The bucket's graph over the views of device_flat, its inputs from now on."""
        bound = key[2]

        def slice_pass(ids, positions, mapping, row_ptr, context_ptr, slots):
            return self.cached_pass(ids, positions, row_ptr, mapping,
                                    PackedContext(slots, context_ptr, bound))
        first = not self.graphs
        with torch.inference_mode():
            # A capture happens mid-serving, at a bucket's first pass, and every run before it
            # stalls that step longer. The first bucket's pass runs once first, recorded, which
            # checks it for host reads and initializes the libraries; a later bucket runs the
            # same code on other shapes and is captured straight (docs/perf-notes.md).
            graph = graphs.capture(slice_pass, self.views(device_flat, key),
                                   constants=self.constants, pool=self.pool,
                                   warmup=int(first), check=first)
        self.graphs[key] = (device_flat, graph)
        return graph
