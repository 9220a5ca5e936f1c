"""v08's paged cache over the prefix block pool: a request takes a lane and shares its cached
prefix's blocks (assign_cached), and its full blocks are sealed once their K/V is written.

With poison_free_blocks, a freed block is poisoned only when nothing is left in it worth
keeping: a block another request still holds is live, and a hashed one stays cached (its K/V is
what a later hit reads). A cached block is poisoned when it is evicted, before its reuse."""
from __future__ import annotations

from typing import Hashable, Sequence

from ..v11_sampling import PagedCache
from .block_pool import PrefixBlockPool


class PrefixCache(PagedCache):
    def make_pool(self, num_blocks: int, block_size: int) -> PrefixBlockPool:
        return PrefixBlockPool(num_blocks, block_size, on_evict=self._evicted)

    def assign_cached(self, request_id: Hashable, tokens: Sequence[int]) -> int:
        """A lane and the blocks for all the tokens, the cached prefix shared; returns the hit
        tokens, whose K/V is in place already (PoolExhausted if the rest is not free)."""
        lane = self.free_lane(request_id)
        hit = self.pool.allocate_cached(request_id, tokens)
        self._lane[request_id] = lane
        return hit

    def seal(self, request_id: Hashable, tokens: Sequence[int]) -> None:
        """Hash and register the request's full blocks; tokens: all it holds K/V for."""
        self.pool.seal(request_id, tokens)

    def released(self, request_id: Hashable) -> list[int]:
        """Of the request's blocks, those nobody else holds and no hash keeps cached."""
        return [b for b in self.pool.table(request_id)
                if self.pool.ref_count(b) == 1 and self.pool.hash_of(b) is None]

    def _evicted(self, block: int) -> None:
        if self.poison_free_blocks:
            self.poison([block])
