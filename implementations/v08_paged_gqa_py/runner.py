"""v07's graphed runner over paged K/V memory. Prefill takes a request's blocks (and a decode
lane) and writes its K/V through its table; each decode step first grows every request by one
token (a new block only when its last one is full), then replays the graph of the step, which
stores and reads K/V through the lanes' block tables."""
from __future__ import annotations

from typing import Sequence

import torch

from ..v07_cuda_graph import GraphedRunner


class PagedRunner(GraphedRunner):
    def decode_step(self, token_ids, positions, block_tables, context_lens, slot_mapping):
        """One decode step over these lanes, through their block tables: float logits."""
        hidden = self.model.forward_decode_paged(self.weights, token_ids, positions, block_tables,
                                                 context_lens, slot_mapping, self.kv.kv)
        return self.model.lm_head(self.weights, hidden).float()

    @torch.inference_mode()
    def prefill(self, requests: Sequence) -> torch.Tensor:
        """Give each request a lane and the blocks for its tokens, store its K/V through its
        table; float logits [B, vocab] of each last token."""
        self.kv.place(requests)
        slots = [s for r in requests for s in self.kv.slots(r.id, 0, len(r.sequence))]
        indptr, ids = self.ragged_inputs([r.sequence for r in requests])
        mapping = self.host_longs(slots).to(self.device)
        hidden = self.model.forward_prefill_paged(self.weights, ids, indptr, mapping, self.kv.kv)
        self.computed(requests)
        return self.last_logits(hidden, indptr)

    def step_lanes(self, requests: Sequence):
        """v07's replay, once each request holds the room of the token it feeds (RequestError if
        the pool is out of blocks: the scheduler preempts before a step gets here)."""
        self.kv.grow(requests)
        return super().step_lanes(requests)
