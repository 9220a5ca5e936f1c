"""v08's paged K/V memory over the prefix block pool: a request takes a lane and shares its cached
prefix's blocks (place_cached), and its full blocks are sealed (hashed and registered) once
their K/V is written. With prefix_cache=False it is v08's memory, unchanged.

With poison_free_blocks, a freed block is poisoned only when nothing is left in it worth
keeping: a block another request still holds is live, and a hashed one stays cached (its K/V is
what a later hit reads). A cached block is poisoned when it is evicted, before its reuse.

The pool (PrefixBlockPool) shares full blocks between requests with the same prompt prefix.
Each full block of a request gets a hash of its parent block's hash and its own token ids: a
chain, so equal hashes mean (barring collisions) equal prefixes, not just equal blocks. A request
that starts with a cached prefix shares those blocks instead of computing their K/V again; a
block counts the block tables that hold it. A block whose count falls to 0 keeps its hash and
K/V and waits, evictable, at the end of the free list: the next allocation that needs a block
takes the least recently freed one and only then drops its hash (an eviction). A hash only
points at a candidate: a hit is confirmed by comparing the whole token prefix, so a collision
never serves another prefix's K/V. The prefix is compared a block at a time: each hashed block
records its own tokens and the record of the block before it (a `Link`), so a block confirmed
after a confirmed parent confirms the prefix to its end, and a long prompt costs one pass over its
tokens, not one per block.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, Sequence

from torchlet.contract import BuildOption, RequestError

from ..v11_sampling import BlockPool, PagedKV


def default_block_hash(parent: Hashable | None, tokens: tuple[int, ...]) -> Hashable:
    """Python's hash of (parent hash, token ids): fast, and its collisions are harmless, since a
    hit also compares the tokens."""
    return hash((parent, tokens))


class Link:
    """A full block's place in a prefix: the link of the block before it (None for a first block)
    and its own token ids. A block evicted and hashed again gets a new link; a link made under
    its old contents keeps them, so it matches the new one only where the tokens are the same
    (a block's K/V depends on the tokens before it, not on which block held them)."""

    __slots__ = ("parent", "tokens")

    def __init__(self, parent: "Link | None", tokens: tuple[int, ...]):
        self.parent, self.tokens = parent, tokens

    def extends(self, parent: "Link | None", tokens: tuple[int, ...]) -> bool:
        """Whether this block follows `parent` with these tokens: the same link before it, or
        one of the same tokens all the way up (a block sealed while the block before it, since
        evicted, was registered, follows that prefix registered again: without this it could
        never be found, and it would hold its hash against the prefix's next registration)."""
        if self.tokens != tokens:
            return False
        mine = self.parent
        while mine is not parent:  # identity first: the walk runs only where the links split
            if mine is None or parent is None or mine.tokens != parent.tokens:
                return False
            mine, parent = mine.parent, parent.parent
        return True

    def prefix(self) -> tuple[int, ...]:
        """Every token up to the block's end."""
        return (self.parent.prefix() if self.parent else ()) + self.tokens


class PrefixBlockPool(BlockPool):
    """BlockPool with reference-counted, hashed full blocks. Without allocate_cached and seal it
    behaves exactly as BlockPool: nothing is hashed, so nothing is shared or kept."""

    def __init__(self, num_blocks: int, block_size: int = 16,
                 block_hash: Callable[[Hashable | None, tuple[int, ...]], Hashable] =
                 default_block_hash, on_evict: Callable[[int], None] | None = None):
        super().__init__(num_blocks, block_size)
        # An ordered dict instead of v08's deque: a revived block leaves the middle in O(1).
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(self._free)
        self.block_hash, self.on_evict = block_hash, on_evict
        self._refs: dict[int, int] = {}             # held block -> tables holding it
        self._hash: dict[int, Hashable] = {}        # hashed block -> its hash
        self._link: dict[int, Link] = {}            # hashed block -> its place in its prefix
        self._cached: dict[Hashable, int] = {}      # hash -> the one block registered under it
        # request -> (hash, link) of its full blocks so far, sealed or shared
        self._chain: dict[int, list[tuple[Hashable, Link]]] = {}
        self.hit_tokens = self.queried_tokens = self.evictions = 0

    # --- lookup --------------------------------------------------------------------------------

    def lookup(self, tokens: Sequence[int]) -> list[int]:
        """The cached blocks a request with these tokens would share now, changing nothing: the
        longest run of full blocks inside tokens[:-1] (the last token is always computed, so the
        request has logits to sample from) whose recorded prefix equals the tokens."""
        tokens, size, hits, parent, link = tuple(tokens), self.block_size, [], None, None
        for end in range(size, len(tokens), size):  # end < len(tokens): never the last token
            own = tokens[end - size:end]
            parent = self.block_hash(parent, own)
            block = self._cached.get(parent)
            if block is None or not self._link[block].extends(link, own):  # a miss or a collision
                break
            hits.append(block)
            link = self._link[block]
        return hits

    def can_allocate_cached(self, tokens: Sequence[int]) -> bool:
        return self._from_free(tokens, self.lookup(tokens)) <= self.num_free

    def _from_free(self, tokens: Sequence[int], hits: list[int]) -> int:
        """Blocks allocate_cached would take off the free list: the new ones, and the cached
        ones nobody holds (they wait on the free list until revived)."""
        idle = sum(1 for b in hits if b not in self._refs)
        return self.blocks_needed(len(tokens)) - len(hits) + idle

    # --- ownership -----------------------------------------------------------------------------

    def allocate_cached(self, request_id: int, tokens: Sequence[int]) -> int:
        """Give a request blocks for all its tokens, sharing the cached prefix; returns the hit
        tokens (whole blocks), whose K/V need not be computed. Refuses as allocate does."""
        hits = self.lookup(tokens)
        self._check_fits(request_id, len(tokens), self._from_free(tokens, hits))
        for block in hits:
            # Revive before taking new blocks, so _take can never evict a block being shared.
            self._free.pop(block, None)
            self._refs[block] = self._refs.get(block, 0) + 1
        fresh = [self._take() for _ in range(self.blocks_needed(len(tokens)) - len(hits))]
        self._tables[request_id] = hits + fresh
        self._tokens[request_id] = len(tokens)
        self._chain[request_id] = [(self._hash[b], self._link[b]) for b in hits]
        self.queried_tokens += len(tokens)
        self.hit_tokens += len(hits) * self.block_size
        return len(hits) * self.block_size

    def seal(self, request_id: int, tokens: Sequence[int]) -> None:
        """Hash every full block of the request not hashed yet, once its K/V is written (tokens:
        all the request holds K/V for), and register it for lookup. A block whose hash another
        block holds already (the same prefix computed twice in one step, or a collision) stays
        private and unhashed: one block per hash."""
        if len(tokens) != self._tokens[request_id]:
            raise RequestError(f"request {request_id} holds {self._tokens[request_id]} tokens, "
                             f"sealed with {len(tokens)}")
        chain = self._chain.setdefault(request_id, [])  # allocate() starts with no hashes
        table, size = self._tables[request_id], self.block_size
        for i in range(len(chain), len(tokens) // size):
            end = (i + 1) * size
            own = tuple(tokens[end - size:end])
            parent, parent_link = chain[-1] if chain else (None, None)
            h = self.block_hash(parent, own)
            holder = self._cached.get(h)
            if holder is None:
                link = self._link[table[i]] = Link(parent_link, own)
                self._cached[h], self._hash[table[i]] = table[i], h
            elif self._link[holder].extends(parent_link, own):
                link = self._link[holder]  # the same prefix computed twice: its blocks follow on
            else:
                link = Link(parent_link, own)  # a collision: this block's place, unregistered
            chain.append((h, link))

    def _take(self) -> int:
        """The least recently freed block; a cached one loses its hash here (it is evicted)."""
        block, _ = self._free.popitem(last=False)
        if block in self._hash:
            del self._cached[self._hash.pop(block)]
            del self._link[block]
            self.evictions += 1
            if self.on_evict is not None:
                self.on_evict(block)
        self._refs[block] = 1
        return block

    def free(self, request_id: int) -> int:
        """Drop the request's hold on its blocks, tail first; a block nobody holds any more goes
        to the end of the free list, keeping its hash, so a request's tail is evicted before its
        head (which others are likelier to share). Returns how many blocks came free."""
        if request_id not in self._tables:
            raise RequestError(f"request {request_id} holds no blocks")
        table = self._tables.pop(request_id)
        del self._tokens[request_id]
        self._chain.pop(request_id, None)
        freed = 0
        for block in reversed(table):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                del self._refs[block]
                self._free[block] = None
                freed += 1
        return freed

    # --- reading -------------------------------------------------------------------------------

    def ref_count(self, block: int) -> int:
        """How many block tables hold the block."""
        return self._refs.get(block, 0)

    def holders(self) -> dict[int, tuple[int, ...]]:
        """Physical block -> every request whose table holds it, for every block in use.
        (owners() names one request per block, as in v08: the last that holds it.)"""
        out: dict[int, tuple[int, ...]] = {}
        for rid, table in self._tables.items():
            for block in table:
                out[block] = out.get(block, ()) + (rid,)
        return out

    def hash_of(self, block: int) -> Hashable | None:
        return self._hash.get(block)

    def cached(self) -> dict[int, tuple[Hashable, tuple[int, ...]]]:
        """Hashed block -> (its hash, the token prefix the hash was made from)."""
        return {b: (h, self._link[b].prefix()) for b, h in self._hash.items()}


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
        return PrefixBlockPool(num_blocks, block_size, self.block_hash or default_block_hash,
                               on_evict=self._evicted)

    def place_cached(self, requests: Sequence) -> None:
        """Each request takes a lane and the blocks for its whole sequence, sharing the longest
        run of cached full blocks it starts with: request.computed is then the hit tokens, whose
        K/V is in place already (PoolExhausted if the rest is not free). Without the prefix
        cache it is place(): a caller places alike whether prefixes are shared or not."""
        if not self.enabled:
            return self.place(requests)
        for request in requests:
            lane = self.free_lane(request.id)
            hit = self.pool.allocate_cached(request.id, request.sequence)
            self.hold(request, lane)
            request.computed = hit

    def seal(self, request) -> None:
        """Hash and register the request's full blocks: its K/V holds its whole sequence.
        Without the prefix cache nothing is registered."""
        if self.enabled:
            self.pool.seal(request.id, request.sequence)

    def seal_filled(self, requests: Sequence) -> None:
        """Seal the block each request's last token filled, if it filled one."""
        if self.enabled:  # checked once here, not per request in seal
            for request in requests:
                if len(request.sequence) % self.block_size == 0:
                    self.pool.seal(request.id, request.sequence)

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
