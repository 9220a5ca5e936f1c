"""v07's runner, which v08's paged parts run as it is, over a prefix cache. A prefill first takes
the request's blocks with place_cached, which shares the longest run of cached full blocks its
prompt starts with; only the rows after them are computed (forward_prefill_cached), and once
their K/V is written every full block of the request is sealed for the next request to find.
Each decode step seals the block it fills. With prefix_cache=False it is v07's runner,
unchanged."""
from __future__ import annotations

from typing import Sequence

import torch

from ..v11_sampling import GraphedRunner


class PrefixRunner(GraphedRunner):
    @torch.inference_mode()
    def prefill(self, requests: Sequence) -> torch.Tensor:
        """Share each request's cached prefix, compute its other rows at their positions, seal
        its full blocks; float logits [B, vocab] of each last token."""
        if not self.kv.enabled:
            return super().prefill(requests)
        self.kv.check_room(requests)  # as if nothing were cached: what v08 holds them to
        self.kv.place_cached(requests)
        hidden, indptr = self.forward_rows(requests, [len(r.sequence) for r in requests])
        for request in requests:
            self.kv.seal(request)
        self.computed(requests)
        return self.last_logits(hidden, indptr)

    def forward_rows(self, requests: Sequence, ends: Sequence[int]):
        """Rows computed .. ends[i] of each placed request's sequence at their positions, their
        K/V stored through its table, each attending over its tokens 0 .. ends[i]: hidden
        [T, hidden] and the pass's req_indptr."""
        starts = [r.computed for r in requests]
        indptr, ids = self.ragged_inputs([r.sequence[a:b]
                                          for r, a, b in zip(requests, starts, ends)])
        positions = self.host_longs([q for a, b in zip(starts, ends)
                                     for q in range(a, b)]).to(self.device)
        # Every request's slots in one copy, viewed per request; its rows store to the last.
        slots = [s for r, b in zip(requests, ends) for s in self.kv.slots(r.id, 0, b)]
        context = list(self.host_longs(slots).to(self.device).split(list(ends)))
        mapping = torch.cat([c[a:] for c, a in zip(context, starts)])
        return self.cached_pass(ids, positions, indptr, mapping, context), indptr

    def cached_pass(self, ids, positions, indptr, mapping, context) -> torch.Tensor:
        """The memory's pass over rows after cached prefixes, on this runner's weights and K/V:
        hidden [T, hidden] (what a graph of a prompt's slice captures)."""
        return self.model.memory.forward_prefill_cached(self.weights, ids, positions, indptr,
                                                        mapping, context, self.kv.kv)

    def decode(self, requests: Sequence) -> torch.Tensor:
        """v07's decode step; then the blocks it filled are sealed."""
        logits = super().decode(requests)
        self.kv.seal_filled(requests)
        return logits

    def decode_tokens(self, requests: Sequence) -> torch.Tensor:
        """v08's decode step's tokens; then the blocks it filled are sealed."""
        tokens = super().decode_tokens(requests)
        self.kv.seal_filled(requests)
        return tokens
