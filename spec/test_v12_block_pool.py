"""v12 page contract, part 1: the prefix block pool, blocks shared by reference count.

What it introduces: PrefixBlockPool, v08's BlockPool whose full blocks are hashed and shared.
Each full block gets block_hash(parent block's hash or None, its token ids): a chain, so a hash
stands for the whole prefix up to the block's end. allocate_cached(request, tokens) shares the
longest run of cached full blocks inside tokens[:-1] and returns the hit tokens; seal(request,
tokens), once the K/V is written, hashes the request's new full blocks and registers each one
whose hash no other block holds. A block counts the tables that hold it; at count 0 it keeps its
hash and K/V and waits on the free list, evictable, until an allocation takes it (least recently
freed first, a request's tail before its head) and only then loses its hash. PrefixKV is
v08's PagedKV over this pool: place_cached, seal, and poisoning that spares cached blocks.

Why v11 needs it: requests that share a system prompt compute the same K/V again and again, and
every copy holds its own blocks.

Core principle: a shared block is never written and never handed out while a table holds it,
and a hit never serves K/V of other tokens: the hash only finds a candidate, the recorded token
prefix confirms it, so even a hash that collides on everything (a spec passes one) serves no
wrong block. At least the last prompt token is always computed, so a full hit still has logits.

Files to compare: implementations/v08_paged_gqa_py/kv.py (BlockPool, PagedKV) with
implementations/v12_prefix_cache/kv.py (PrefixBlockPool, PrefixKV).

Tradeoff left visible: each hashed block keeps its whole token prefix to compare (memory
quadratic in the prompt, over the block size), and a hit compares it again. Two requests with the
same prefix that are prefilled in the same step both compute it: the second one's blocks stay
private and unhashed, so one hash names one block. A block freed with its hash keeps the pool
"full" of cached K/V that the next allocation may have to evict.
"""
from __future__ import annotations

from collections import Counter

import pytest
from types import SimpleNamespace

import torch
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule, run_state_machine_as_test

from spec.support.inputs.paged_strategies import BLOCK_SIZES
from spec.test_v08_block_pool import PoolMachine
from torchlet.contract import PREFIX_CACHE, ModelConfig, RequestError

# run against the first version to export this very pool and cache (later ones re-export them)
pytestmark = pytest.mark.spec(needs=PREFIX_CACHE, part="kv",
                              first_with=("PrefixBlockPool", "PrefixKV"))

A, B, C, D = "a", "b", "c", "d"
F, R, S, T = "f", "r", "s", "t"  # a filler, and the requests of the re-registered prefix


def weak(parent, tokens):
    """A hash that collides on everything."""
    return 0


def parentless(parent, tokens):
    """A hash of the block's own tokens: blocks that end different prefixes collide."""
    return hash(tokens)


# --- sharing, with exact block ids ------------------------------------------------------------

def test_a_prompt_that_starts_with_a_sealed_prefix_shares_its_full_blocks(impl):
    pool = impl.package.PrefixBlockPool(10, block_size=4)
    prompt = list(range(10))
    assert pool.allocate_cached(A, prompt) == 0 and pool.table(A) == [1, 2, 3]
    pool.seal(A, prompt)
    assert sorted(pool.cached()) == [1, 2]                   # the partial block has no hash
    assert pool.allocate_cached(B, prompt[:8] + [99, 98]) == 8
    assert pool.table(B) == [1, 2, 4]                        # the first differing block: private
    assert pool.holders() == {1: (A, B), 2: (A, B), 3: (A,), 4: (B,)}
    assert (pool.ref_count(1), pool.ref_count(3), pool.num_used) == (2, 1, 4)
    assert (pool.queried_tokens, pool.hit_tokens) == (20, 8)


def test_a_forced_collision_serves_no_block_whose_tokens_differ(impl):
    pool = impl.package.PrefixBlockPool(10, block_size=2, block_hash=weak)
    pool.allocate_cached(A, [1, 2, 3, 4, 5])
    pool.seal(A, [1, 2, 3, 4, 5])
    assert pool.cached() == {1: (0, (1, 2))}                 # one hash, one block
    assert pool.allocate_cached(B, [7, 8, 9]) == 0           # same hash, other tokens: a miss
    assert pool.allocate_cached(C, [1, 2, 3]) == 2 and pool.table(C)[0] == 1


def test_a_block_that_ends_another_prefix_is_no_hit_even_with_its_own_tokens_and_hash(impl):
    pool = impl.package.PrefixBlockPool(12, block_size=2, block_hash=parentless)
    pool.allocate_cached(A, [1, 2, 3, 4, 9])
    pool.seal(A, [1, 2, 3, 4, 9])                            # (1, 2) and (3, 4) registered
    pool.allocate_cached(B, [5, 6, 3, 4, 9])
    pool.seal(B, [5, 6, 3, 4, 9])                            # (5, 6); its (3, 4) collides
    assert pool.hash_of(pool.table(B)[1]) is None
    # C's second block has A's second block's tokens and hash, but A's block ends 1 2 3 4.
    assert pool.allocate_cached(C, [5, 6, 3, 4, 0]) == 2
    assert pool.table(C)[:1] == pool.table(B)[:1] and pool.table(C)[1] != pool.table(A)[1]


def test_a_block_sealed_after_its_prefix_is_found_again_once_that_prefix_is_registered_anew(impl):
    """R computes (1, 2) beside A, whose copy is registered; R's (9, 7) is then sealed after A's
    (1, 2). A's block is evicted and S registers (1, 2) in a block of its own: a prompt 1 2 9 7
    ... shares S's block and R's (9, 7), whose K/V was computed after the same tokens."""
    pool = impl.package.PrefixBlockPool(8, block_size=2)
    pool.allocate_cached(A, [1, 2, 9])
    pool.allocate_cached(R, [1, 2, 9])                       # both compute (1, 2) in one step
    pool.seal(A, [1, 2, 9])
    pool.seal(R, [1, 2, 9])                                  # A's (1, 2) is the registered one
    pool.append_token(R)
    pool.seal(R, [1, 2, 9, 7])                               # R's (9, 7) follows it
    first, second = pool.table(A)[0], pool.table(R)[1]
    pool.free(A)
    pool.allocate(F, 2 * pool.num_free)                      # takes every free block: evicts A's
    assert pool.hash_of(first) is None
    pool.free(F)
    pool.allocate_cached(S, [1, 2, 5])
    pool.seal(S, [1, 2, 5])                                  # (1, 2) registered again
    assert pool.allocate_cached(T, [1, 2, 9, 7, 3]) == 4
    assert pool.table(T)[:2] == [pool.table(S)[0], second]


# --- edge cases ---------------------------------------------------------------------------------

def test_a_full_hit_at_a_block_boundary_leaves_the_last_block_to_compute(impl):
    pool = impl.package.PrefixBlockPool(10, block_size=4)
    prompt = list(range(8))
    pool.allocate_cached(A, prompt)
    pool.seal(A, prompt)
    assert sorted(pool.cached()) == pool.table(A)            # both blocks cached
    assert pool.allocate_cached(B, prompt) == len(prompt) - 4  # not 8: the last token has logits
    assert pool.table(B)[0] == pool.table(A)[0] and pool.table(B)[1] not in pool.table(A)


def test_a_prompt_of_at_most_one_block_never_hits(impl):
    pool = impl.package.PrefixBlockPool(10, block_size=4)
    for rid, prompt in ((A, [1, 2, 3]), (B, [1, 2, 3, 4])):
        pool.allocate_cached(rid, prompt)
        pool.seal(rid, prompt)
    assert sorted(pool.cached()) == pool.table(B)            # B's one block is cached ...
    assert pool.allocate_cached(C, [1, 2, 3]) == 0
    assert pool.allocate_cached(D, [1, 2, 3, 4]) == 0        # ... but it holds the last token
    assert pool.hit_tokens == 0


def test_two_requests_with_one_prefix_before_either_is_sealed_compute_it_twice(impl):
    """Both are prefilled in the same step, so both compute the prefix: neither can share what
    is not written yet. The second to seal keeps its blocks private and unhashed; the next
    request shares the first's."""
    pool = impl.package.PrefixBlockPool(12, block_size=4)
    prompt = list(range(9))
    assert pool.allocate_cached(A, prompt) == 0
    assert pool.allocate_cached(B, prompt) == 0
    assert not set(pool.table(A)) & set(pool.table(B))
    pool.seal(A, prompt)
    pool.seal(B, prompt)
    assert sorted(pool.cached()) == pool.table(A)[:2]
    assert [pool.hash_of(b) for b in pool.table(B)] == [None] * 3
    assert pool.allocate_cached(C, prompt) == 8 and pool.table(C)[:2] == pool.table(A)[:2]


def test_an_aborted_request_leaves_the_blocks_it_shares_with_the_other(impl):
    pool = impl.package.PrefixBlockPool(10, block_size=4)
    prompt = list(range(10))
    pool.allocate_cached(A, prompt)
    pool.seal(A, prompt)
    pool.allocate_cached(B, prompt)                          # shares A's blocks 1 and 2
    shared, mine, tail = pool.table(B)[:2], pool.table(B), pool.table(A)[2]
    free_before = pool.free_blocks()
    assert pool.free(A) == 1                                 # only A's private tail came free
    assert pool.free_blocks() == free_before + [tail]
    assert pool.table(B) == mine and [pool.ref_count(b) for b in shared] == [1, 1]
    assert not set(shared) & set(pool.free_blocks())
    pool.free(B)                                             # now nobody holds them: cached
    assert sorted(pool.cached()) == shared and set(shared) <= set(pool.free_blocks())
    assert pool.allocate_cached(C, prompt) == 8 and pool.table(C)[:2] == shared  # revived
    assert not set(shared) & set(pool.free_blocks())


def test_freed_cached_blocks_are_evicted_least_recently_used_a_requests_tail_first(impl):
    pool = impl.package.PrefixBlockPool(10, block_size=2)    # 9 usable
    prompt = [1, 2, 3, 4, 5, 6, 7]
    pool.allocate_cached(A, prompt)                          # [1, 2, 3, 4]
    pool.seal(A, prompt)                                     # 1, 2, 3 hashed; 4 partial
    pool.free(A)
    assert pool.free_blocks() == [5, 6, 7, 8, 9, 4, 3, 2, 1]
    assert pool.allocate_cached(B, [9] * 11) == 0            # 6 blocks: never-used ones, and 4
    assert pool.table(B) == [5, 6, 7, 8, 9, 4] and pool.evictions == 0
    pool.allocate_cached(D, [8])                             # A's tail goes first
    assert pool.table(D) == [3] and pool.evictions == 1 and sorted(pool.cached()) == [1, 2]
    pool.free(B)
    assert pool.allocate_cached(C, prompt) == 4              # A's head is still cached
    assert pool.table(C)[:2] == [1, 2]


def test_an_exhausted_pool_refuses_a_cached_allocation_and_changes_nothing(impl):
    pool = impl.package.PrefixBlockPool(5, block_size=2)     # 4 usable
    prompt = [1, 2, 3, 4, 5]
    pool.allocate_cached(A, prompt)
    pool.seal(A, prompt)
    pool.free(A)                                             # 1 and 2 cached, all 4 free
    pool.allocate_cached(B, [8, 8, 8])                       # [4, 3]: 1 and 2 stay cached
    # C shares 1 and 2, but reviving them takes them off the free list too: 3 needed, 2 free.
    before = (pool.free_blocks(), pool.cached(), pool.holders(), pool.hit_tokens)
    assert not pool.can_allocate_cached(prompt + [6, 7])
    with pytest.raises(impl.package.PoolExhausted):
        pool.allocate_cached(C, prompt + [6, 7])
    assert (pool.free_blocks(), pool.cached(), pool.holders(), pool.hit_tokens) == before
    with pytest.raises(RequestError, match="4 usable blocks"):
        pool.allocate_cached(C, list(range(9)))
    assert not pool.holds(C)


def test_the_prefix_cache_poisons_a_freed_block_unless_it_is_shared_or_cached(impl):
    config = ModelConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_layers=2,
                         num_heads=2, num_kv_heads=1, head_dim=4, max_position=64)
    cache = impl.package.PrefixKV(config, 3, 16, "cpu", torch.float32, num_blocks=6,
                                  block_size=2, poison_free_blocks=True)
    nan = {b for b in range(6) if torch.isnan(cache.kv[0][0][b]).all()}
    assert nan == set(range(6))

    def write(rid, start=0):
        for k, v in cache.kv:
            for b in cache.pool.table(rid)[start:]:
                k[b], v[b] = 1.0, 1.0

    def poisoned():
        return {b for b in range(1, 6) if torch.isnan(cache.kv[1][1][b]).all()}

    def place(rid, tokens):
        """A request's tokens placed, its cached prefix shared: the hit tokens."""
        request = SimpleNamespace(id=rid, sequence=tokens)
        cache.place_cached([request])
        return request

    prompt = [1, 2, 3, 4, 5]
    a = place(A, prompt)
    assert a.computed == 0
    write(A)
    cache.seal(a)                                            # blocks 1, 2 cached; 3 partial
    assert place(B, prompt).computed == 4
    write(B, start=2)                                        # B writes its private block 4 only
    cache.free(A)
    assert poisoned() == {3, 5}                              # A's tail; 1, 2 are B's too
    cache.free(B)
    assert poisoned() == {3, 4, 5}                           # B's tail; 1, 2 are cached
    assert place(C, [7] * 9).computed == 0                   # 5 blocks: evicts 1 (then 2)
    assert cache.pool.evictions == 2 and poisoned() == {1, 2, 3, 4, 5}


# --- allocator stress ----------------------------------------------------------------------------

VOCAB = 4                         # few ids: different prefixes often hold equal blocks
PREFIXES = [tuple((k * 7 + i * (k + 1)) % VOCAB for i in range(24)) for k in range(2)]
HASHES = {"python": None, "weak": weak, "parentless": parentless}


def next_token(sequence: list[int]) -> int:
    """What decode generates: a function of the prefix, as greedy decoding is, so requests with
    one prompt fill equal blocks and decode-filled blocks are shared too."""
    return (sequence[-1] * 3 + len(sequence)) % VOCAB


class PrefixPoolMachine(PoolMachine):
    """v08's machine (its rules: allocate without the cache, append, finish, abort, preempt and
    re-allocate) over a prefix pool, plus requests whose prompts start with one of a few shared
    prefixes, allocated through the cache, sealed, and grown by decode with a seal after each
    token. The machine writes each request's K/V (a record of the token prefix each block holds,
    `content`) after every step, and checks every hit against what was written."""

    POOL = "PrefixBlockPool"  # the package's pool class the machine drives

    def __init__(self, package):
        super().__init__(package)
        self.sequences: dict[int, list[int]] = {}  # request -> its tokens (prompt, generated)
        self.written: dict[int, int] = {}          # request holding blocks -> K/V positions written
        self.sealed: dict[int, int] = {}           # request holding blocks -> full blocks sealed
        self.content: dict[int, tuple] = {}        # block -> the token prefix its K/V was made of
        self.queried = self.hits = 0

    @initialize(shape=st.tuples(st.integers(2, 40), st.sampled_from(BLOCK_SIZES)),
                hash_name=st.sampled_from(sorted(HASHES)))
    def make_pool(self, shape, hash_name):
        block_hash = {} if HASHES[hash_name] is None else {"block_hash": HASHES[hash_name]}
        self.pool = getattr(self.package, self.POOL)(*shape, **block_hash)
        self.usable = set(range(1, self.pool.num_blocks))

    # Shared blocks are held by several requests: the reference-count invariant below replaces
    # v08's exclusive ownership.
    every_usable_block_is_free_or_owned_by_exactly_one_request = None

    def sequence(self, rid: int, n: int) -> list[int]:
        """The first n tokens of a request; one added by v08's rule starts with a token of its
        own, so it shares nothing."""
        seq = self.sequences.setdefault(rid, [VOCAB + rid])
        while len(seq) < n:
            seq.append(next_token(seq))
        return seq[:n]

    def held_by(self) -> Counter:
        return Counter(b for rid in self.pool.requests() for b in self.pool.table(rid))

    def write_kv(self):
        """Compute what each request holds but has not written: only into blocks that no other
        table holds (a shared block is never overwritten)."""
        for rid in set(self.written) | set(self.sealed):
            if not self.pool.holds(rid):
                self.written.pop(rid, None)
                self.sealed.pop(rid, None)
        held, size = self.held_by(), self.pool.block_size
        for rid in self.pool.requests():
            n, start = self.pool.num_tokens(rid), self.written.get(rid, 0)
            seq, table = self.sequence(rid, n), self.pool.table(rid)
            for i in range(start // size, -(-n // size)):
                assert held[table[i]] == 1, (
                    f"request {rid} writes K/V into block {table[i]}, which {held[table[i]]} "
                    f"tables hold")
                self.content[table[i]] = tuple(seq[:min(n, (i + 1) * size)])
            self.written[rid] = n

    def snapshot(self):
        return (self.pool.free_blocks(), self.pool.cached(), self.pool.holders(),
                self.pool.hit_tokens, self.pool.queried_tokens, self.pool.evictions)

    # --- rules ---------------------------------------------------------------------------------

    @rule(prefix=st.integers(0, len(PREFIXES) - 1), cut=st.integers(0, 24),
          suffix=st.lists(st.integers(0, VOCAB - 1), max_size=6))
    def add_prefixed_request(self, prefix, cut, suffix):
        prompt = list(PREFIXES[prefix][:cut]) + suffix or [0]
        if self.pool.blocks_needed(len(prompt)) > len(self.usable):
            before = self.snapshot()
            with pytest.raises(RequestError):
                self.pool.allocate_cached(-1, prompt)
            assert self.snapshot() == before
            return
        self.sequences[self.next_id] = prompt
        self.waiting[self.next_id] = len(prompt)
        self.next_id += 1

    @precondition(lambda self: self.waiting)
    @rule(pick=st.integers(0, 1000), seal_now=st.booleans())
    def allocate_through_the_cache(self, pick, seal_now):
        """A waiting request (new, or preempted: all its tokens again) shares its cached prefix;
        sealed at once (its prefill done), or later (others prefilled in the same step)."""
        rid = self._pick(self.waiting, pick)
        tokens = self.sequence(rid, self.waiting[rid])
        size = self.pool.block_size
        expected = []  # the longest run of cached blocks that end the prompt's prefixes
        cached = {prefix: b for b, (_, prefix) in self.pool.cached().items()}
        for end in range(size, len(tokens), size):
            if tuple(tokens[:end]) not in cached:
                break
            expected.append(cached[tuple(tokens[:end])])
        if not self.pool.can_allocate_cached(tokens):
            before = self.snapshot()
            with pytest.raises(self.package.PoolExhausted):
                self.pool.allocate_cached(rid, tokens)
            assert self.snapshot() == before and not self.pool.holds(rid)
            return
        hit = self.pool.allocate_cached(rid, tokens)
        table = self.pool.table(rid)
        assert hit == len(expected) * size and table[:len(expected)] == expected
        assert hit < len(tokens), "a hit covered the last token: it would have no logits"
        for i, block in enumerate(table[:len(expected)]):
            assert self.content.get(block) == tuple(tokens[:(i + 1) * size]), (
                f"hit block {block} holds the K/V of {self.content.get(block)}, not of the "
                f"request's {tuple(tokens[:(i + 1) * size])}")
        self.queried, self.hits = self.queried + len(tokens), self.hits + hit
        self.running[rid] = self.waiting.pop(rid)
        self.written[rid], self.sealed[rid] = hit, hit // size
        if seal_now:
            self.seal_written(rid)

    def seal_written(self, rid):
        """Seal after the K/V is written: each newly full block is hashed, or another block holds
        its hash (the same prefix, or a collision)."""
        self.write_kv()
        tokens = self.sequence(rid, self.running[rid])
        self.pool.seal(rid, tokens)
        size, parent = self.pool.block_size, None
        hashes = {h for h, _ in self.pool.cached().values()}
        for i, block in enumerate(self.pool.table(rid)[:len(tokens) // size]):
            parent = self.pool.block_hash(parent, tuple(tokens[i * size:(i + 1) * size]))
            assert self.pool.hash_of(block) in (parent, None), f"block {block}: a foreign hash"
            assert i < self.sealed.get(rid, 0) or parent in hashes, (
                f"block {i} of request {rid} was sealed, but no block holds its hash")
        self.sealed[rid] = len(tokens) // size

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 1000))
    def seal(self, pick):
        self.seal_written(self._pick(self.running, pick))

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 1000), count=st.integers(1, 12))
    def decode_and_seal(self, pick, count):
        """Decode a token at a time; the runner seals after every step, so a block is hashed
        as soon as decode fills it."""
        rid = self._pick(self.running, pick)
        for _ in range(count):
            before = self.running[rid]
            PoolMachine.append_tokens(self, pick, 1)   # v08's growth, with its checks
            if self.running[rid] == before:
                return                                 # the pool ran dry
            self.seal_written(rid)

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 1000))
    def finish(self, pick):
        """Only the blocks no other table holds come free, tail first, to the end of the list."""
        rid = self._pick(self.running, pick)
        held = self.held_by()
        alone = [b for b in reversed(self.pool.table(rid)) if held[b] == 1]
        free_before = self.pool.free_blocks()
        assert self.pool.free(rid) == len(alone)
        assert self.pool.free_blocks() == free_before + alone
        del self.running[rid]

    # --- invariants ----------------------------------------------------------------------------

    @invariant()
    def each_blocks_count_is_the_number_of_tables_holding_it_and_count_0_is_free(self):
        held = self.held_by()
        assert all(self.pool.ref_count(b) == held[b] for b in self.usable), (
            {b: (self.pool.ref_count(b), held[b]) for b in self.usable
             if self.pool.ref_count(b) != held[b]})
        free = self.pool.free_blocks()
        assert len(free) == len(set(free)), "a block is on the free list twice"
        assert set(free) == {b for b in self.usable if held[b] == 0}, (
            f"free list {sorted(free)}, held by no table: "
            f"{sorted(b for b in self.usable if held[b] == 0)}")
        assert self.pool.num_used == len(held) and self.pool.num_free == len(free)

    @invariant()
    def every_hashed_block_holds_the_tokens_its_hash_was_made_from(self):
        self.write_kv()
        size, cached = self.pool.block_size, self.pool.cached()
        assert len({h for h, _ in cached.values()}) == len(cached), "one hash names two blocks"
        for block, (h, prefix) in cached.items():
            assert prefix and len(prefix) % size == 0, f"block {block} hashed for {prefix}"
            parent = None
            for end in range(size, len(prefix) + 1, size):
                parent = self.pool.block_hash(parent, prefix[end - size:end])
            assert h == parent, f"block {block}'s hash is not the chain of {prefix}"
            assert self.content.get(block) == prefix, (
                f"block {block} is hashed for {prefix} but holds the K/V of "
                f"{self.content.get(block)}")
        for rid in self.pool.requests():   # a holder's tokens are the block's recorded prefix
            seq = self.sequence(rid, self.pool.num_tokens(rid))
            for i, block in enumerate(self.pool.table(rid)):
                if block in cached:
                    assert cached[block][1] == tuple(seq[:(i + 1) * size])

    @invariant()
    def the_null_block_is_never_held_hashed_or_free(self):
        assert all(0 not in self.pool.table(r) for r in self.pool.requests())
        assert 0 not in self.pool.cached() and self.pool.ref_count(0) == 0
        assert 0 not in self.pool.free_blocks()

    @invariant()
    def the_counters_count_what_was_looked_up_and_found(self):
        assert (self.pool.queried_tokens, self.pool.hit_tokens) == (self.queried, self.hits)

    def teardown(self):
        super().teardown()   # frees every running request: all usable blocks free, none leaked
        if hasattr(self, "pool"):
            assert self.pool.holders() == {} and all(
                self.pool.ref_count(b) == 0 for b in self.usable)
            assert set(self.pool.cached()) <= set(self.pool.free_blocks())


def test_shared_blocks_under_random_prefixes_decode_seal_free_and_eviction_keep_every_invariant(
        impl):
    # Examples come from the active profile (ci: 200, stress: 5,000); no settings here.
    run_state_machine_as_test(lambda: PrefixPoolMachine(impl.package))
