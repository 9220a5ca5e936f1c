"""v08's paged K/V memory over the prefix block pool: a request takes a lane and shares its cached
prefix's blocks (place_cached), and its full blocks are sealed (hashed and registered) once
their K/V is written. With prefix_cache=False it is v08's memory, unchanged.

With poison_free_blocks, a freed block is poisoned only when nothing is left in it worth
keeping: a block another request still holds is live, and a hashed one stays cached (its K/V is
what a later hit reads). A cached block is poisoned when it is evicted, before its reuse."""
from __future__ import annotations

from typing import Callable, Hashable, Sequence

from torchlet.contract import BuildOption

from ..v11_sampling import BlockPool, PagedKV
from .block_pool import PrefixBlockPool


class PrefixKV(PagedKV):
    OPTIONS = PagedKV.OPTIONS + (
        BuildOption("prefix_cache", bool, True, "share cached prompt prefixes (False: v11's "
                    "engine)"),
        BuildOption("block_hash", Callable, None, "block_hash(parent hash, token ids) -> int in "
                    "place of the pool's hash (None: Python's hash of the pair)"),
    )
    SERVES = PagedKV.SERVES + ("prefix_cache_stats", "cached_blocks")  # prefix_cache's API

    def __init__(self, *args, prefix_cache: bool = True, block_hash: Callable | None = None,
                 **kwargs):
        """PagedKV's arguments; block_hash(parent hash, block token ids) -> int replaces the
        pool's hash (a spec's weak one forces collisions). Kept before the constructor runs,
        since it makes the pool."""
        self.enabled, self.block_hash = prefix_cache, block_hash
        super().__init__(*args, **kwargs)

    @classmethod
    def assemble(cls, a) -> "PrefixKV":
        o = a.options
        return cls(a.config, *cls.limits(a), a.device, a.dtype, o["num_blocks"], o["block_size"],
                   o["poison_free_blocks"], prefix_cache=o["prefix_cache"],
                   block_hash=o["block_hash"])

    def make_pool(self, num_blocks: int, block_size: int) -> BlockPool:
        if not self.enabled:
            return super().make_pool(num_blocks, block_size)
        pool = PrefixBlockPool(num_blocks, block_size, on_evict=self._evicted)
        if self.block_hash is not None:
            pool.block_hash = self.block_hash
        return pool

    def place_cached(self, requests: Sequence) -> None:
        """Each request takes a lane and the blocks for its whole sequence, sharing the longest
        run of cached full blocks it starts with: request.computed is then the hit tokens, whose
        K/V is in place already (PoolExhausted if the rest is not free)."""
        for request in requests:
            lane = self.free_lane(request.id)
            hit = self.pool.allocate_cached(request.id, request.sequence)
            self.hold(request, lane)
            request.computed = hit

    def seal(self, request) -> None:
        """Hash and register the request's full blocks: its K/V holds its whole sequence."""
        self.pool.seal(request.id, request.sequence)

    def seal_filled(self, requests: Sequence) -> None:
        """Seal the block each request's last token filled, if it filled one."""
        if self.enabled:
            for request in requests:
                if len(request.sequence) % self.block_size == 0:
                    self.seal(request)

    def released(self, request_id: Hashable) -> list[int]:
        """Of the request's blocks, those nobody else holds and no hash keeps cached."""
        if not self.enabled:
            return super().released(request_id)
        return [b for b in self.pool.table(request_id)
                if self.pool.ref_count(b) == 1 and self.pool.hash_of(b) is None]

    def _evicted(self, block: int) -> None:
        if self.poison_free_blocks:
            self.poison([block])

    def prefix_cache_stats(self) -> dict[str, int]:
        """Prompt tokens looked up, tokens found cached (not computed), cached blocks evicted."""
        if not self.enabled:
            return {"queried_tokens": 0, "hit_tokens": 0, "evictions": 0}
        pool = self.pool
        return {"queried_tokens": pool.queried_tokens, "hit_tokens": pool.hit_tokens,
                "evictions": pool.evictions}

    def cached_blocks(self) -> list[int]:
        """Free blocks that keep a hash, and so their K/V: the pool hands free blocks out from
        the front, so the free list's order is the eviction order."""
        if not self.enabled:
            return []
        return [b for b in self.pool.free_blocks() if self.pool.hash_of(b) is not None]
