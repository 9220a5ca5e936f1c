"""v12's runner with a prefill pass over slices: each request of the pass computes the next rows
of its sequence, wherever its K/V has got to, and only a request whose slice ends its sequence
has the LM head run on its last row and a token drawn. Where the decode step replays graphs
and the layers run their kernels, a slice pass replays one too (slices.py): without it a slice
step is host-bound on a GPU, and the running requests' tokens wait for its launches."""
from __future__ import annotations

from functools import cached_property
from typing import Sequence

import torch

from ..v14_overlap import PrefixRunner
from .slices import MAX_ROWS, SliceGraphs


class ChunkedRunner(PrefixRunner):
    def prefill_tokens(self, batch) -> torch.Tensor:
        """The tokens of the prefills whose slice ends their sequence, in batch.sampled order."""
        logits = self.prefill_slices(batch.prefill, batch.ends)
        self.sampler.bind(batch.sampled)
        return self.sampler.draw(logits, batch.sampled)

    @torch.inference_mode()
    def prefill_slices(self, requests: Sequence, ends: Sequence[int]) -> torch.Tensor:
        """Rows computed .. ends[i] of each placed request (the scheduler placed it when it was
        admitted); a request whose sequence is then all computed has its full blocks sealed for
        the prefix cache. Float logits [sampled, vocab] of those requests' last rows."""
        hidden, indptr = self.forward_rows(requests, ends)
        done = []
        for i, (request, end) in enumerate(zip(requests, ends)):
            request.computed = end
            if end == len(request.sequence):
                done.append(i)
                self.kv.seal(request)  # nothing is registered without the prefix cache
        # The finished requests' last rows, their index stacked on the device: an index from a
        # host list would be copied from pageable memory, and that copy waits for the GPU to
        # finish the pass (on an H100 the host stalled 4 ms a finishing slice there).
        last = self.model.last_rows(indptr)
        rows = torch.stack([last[i] for i in done]) if done else last[:0]
        return self.model.lm_head(self.weights, hidden[rows]).float()

    def forward_rows(self, requests: Sequence, ends: Sequence[int]):
        """v12's pass, or its graph's replay where the slice graphs run and the pass has at most
        MAX_ROWS rows."""
        rows = sum(end - r.computed for r, end in zip(requests, ends))
        if self.slice_graphs is None or rows > MAX_ROWS:
            return super().forward_rows(requests, ends)
        return self.slice_graphs.forward_rows(requests, ends)

    @cached_property
    def slice_graphs(self) -> SliceGraphs | None:
        """The slice passes' graphs, where graphs are on and the layers run their kernels (the
        PyTorch path's attention reads each context's length back to the host)."""
        if self.use_graphs and self.model.ops.on_triton:
            return SliceGraphs(self.kv, self.device, self.cached_pass,
                               constants=(self.weights, self.kv.kv))
        return None
