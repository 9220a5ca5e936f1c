"""v11's runner over a prefix cache. A prefill first takes the request's blocks with
assign_cached, which shares the longest run of cached full blocks its prompt starts with; only
the rows after them are computed (forward_prefill_cached), and once their K/V is written every
full block of the request is sealed: hashed and registered for the next request to find. Each
decode step seals the block it fills. With prefix_cache=False it is v11's runner, unchanged."""
from __future__ import annotations

from typing import Callable, Hashable, Sequence

import torch

from ..v11_sampling import SamplingRunner
from .cache import PrefixCache


class PrefixRunner(SamplingRunner):
    def __init__(self, *args, prefix_cache: bool = True, block_hash: Callable | None = None,
                 **kwargs):
        """SamplingRunner's arguments; prefix_cache=False keeps v11's cache and passes;
        block_hash(parent hash, block token ids) -> int replaces the pool's hash (a spec's weak
        one forces collisions). Kept before the constructor runs, since it calls make_cache."""
        self.prefix_cache, self.block_hash = prefix_cache, block_hash
        if prefix_cache:
            self.cache_class = PrefixCache
        super().__init__(*args, **kwargs)
        if prefix_cache and block_hash is not None:
            self.pool.block_hash = block_hash

    @torch.inference_mode()
    def prefill(self, request_ids: Sequence[Hashable], prompts: Sequence[Sequence[int]]):
        """Share each request's cached prefix, compute its other rows at their positions, seal
        its full blocks; float logits [B, vocab] of each last token."""
        if not self.prefix_cache:
            return super().prefill(request_ids, prompts)
        self.check_prefill(request_ids, prompts)
        hits = [self.cache.assign_cached(r, p) for r, p in zip(request_ids, prompts)]
        rows = [p[h:] for p, h in zip(prompts, hits)]
        indptr, ids = self.ragged_inputs(rows)
        positions = self.host_longs([q for h, p in zip(hits, prompts)
                                     for q in range(h, len(p))]).to(self.device)
        # Every request's slots in one copy, viewed per request; its rows store to the last.
        slots = [s for r, p in zip(request_ids, prompts) for s in self.cache.slots(r, 0, len(p))]
        context = list(self.host_longs(slots).to(self.device).split([len(p) for p in prompts]))
        mapping = torch.cat([c[h:] for c, h in zip(context, hits)])
        hidden = self.model.forward_prefill_cached(self.weights, ids, positions, indptr, mapping,
                                                   context, self.cache.kv)
        for r, p in zip(request_ids, prompts):
            self.cache.seal(r, p)
        return self.last_logits(hidden, indptr)

    def decode(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """v11's decode step; then the blocks it filled are sealed (only a request whose token
        count reached a block boundary has a new full block)."""
        logits = super().decode(request_ids, sequences)
        self.seal_filled(request_ids, sequences)
        return logits

    def seal_filled(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Seal the block each request's last token filled, if it filled one."""
        if self.prefix_cache:
            for r, seq in zip(request_ids, sequences):
                if len(seq) % self.block_size == 0:
                    self.cache.seal(r, seq)
