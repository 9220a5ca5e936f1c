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
        positions = torch.tensor([h + j for h, row in zip(hits, rows) for j in range(len(row))],
                                 dtype=torch.long, device=self.device)
        mapping = torch.tensor([s for r, p, h in zip(request_ids, prompts, hits)
                                for s in self.cache.slots(r, h, len(p) - h)],
                               dtype=torch.long, device=self.device)
        context = [torch.tensor(self.cache.slots(r, 0, len(p)), dtype=torch.long,
                                device=self.device) for r, p in zip(request_ids, prompts)]
        hidden = self.model.forward_prefill_cached(self.weights, ids, positions, indptr, mapping,
                                                   context, self.cache.kv)
        for r, p in zip(request_ids, prompts):
            self.cache.seal(r, p)
        return self.last_logits(hidden, indptr)

    def decode(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """v11's decode step; then the blocks it filled are sealed (only a request whose token
        count reached a block boundary has a new full block)."""
        logits = super().decode(request_ids, sequences)
        if self.prefix_cache:
            for r, seq in zip(request_ids, sequences):
                if len(seq) % self.block_size == 0:
                    self.cache.seal(r, seq)
        return logits
