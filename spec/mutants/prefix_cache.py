"""Prefix cache (v12): shared blocks are counted, never handed out or written while held, and a
hit serves only K/V of the same tokens. Each mutant keeps allocation without sharing right, so
v08's allocator specs pass against it; the prefix pool's page must notice."""
from spec.mutants import Edit, Mutant

POOL = "v12_prefix_cache/kv.py"  # its PrefixBlockPool
KV = "v12_prefix_cache/kv.py"
RUNNER = "v12_prefix_cache/runner.py"

PAGE = "spec/test_v12_block_pool.py"
MACHINE = (f"{PAGE}::test_shared_blocks_under_random_prefixes_decode_seal_free_and_eviction_keep_"
           f"every_invariant")
COLLISION = f"{PAGE}::test_a_forced_collision_serves_no_block_whose_tokens_differ"
AGAIN = (f"{PAGE}::test_a_block_sealed_after_its_prefix_is_found_again_once_that_prefix_is_"
         f"registered_anew")
OTHER_PREFIX = (f"{PAGE}::test_a_block_that_ends_another_prefix_is_no_hit_even_with_its_own_"
                f"tokens_and_hash")
BOUNDARY = f"{PAGE}::test_a_full_hit_at_a_block_boundary_leaves_the_last_block_to_compute"
SHORT = f"{PAGE}::test_a_prompt_of_at_most_one_block_never_hits"
TWICE = f"{PAGE}::test_two_requests_with_one_prefix_before_either_is_sealed_compute_it_twice"
ABORT = f"{PAGE}::test_an_aborted_request_leaves_the_blocks_it_shares_with_the_other"
LRU = f"{PAGE}::test_freed_cached_blocks_are_evicted_least_recently_used_a_requests_tail_first"
POISON = f"{PAGE}::test_the_prefix_cache_poisons_a_freed_block_unless_it_is_shared_or_cached"
CACHED = ("spec/test_v12_prefix_cache.py::test_a_finished_requests_full_blocks_stay_cached_and_"
          "are_evicted_in_the_order_listed")
CHAT = ("spec/test_v12_prefix_cache.py::test_each_turn_of_a_chat_computes_only_the_rows_the_turn_"
        "before_did_not_write")

PROPERTY = "prefix cache"
V12 = ("v12",)

MUTANTS = [
    Mutant("v12-shared-count-not-decremented-on-free", PROPERTY, (
        Edit(POOL, "            self._refs[block] -= 1\n",
             "            if self._refs[block] == 1:  # a shared block keeps its count\n"
             "                self._refs[block] = 0\n"),),
        (ABORT, MACHINE), V12,
        "freeing (finish, abort, preemption) a request does not count it off its shared blocks"),
    Mutant("v12-revived-block-stays-free", PROPERTY, (
        Edit(POOL, "            self._free.pop(block, None)\n",
             "            pass  # a hit on an idle cached block leaves it on the free list\n"),),
        (ABORT, MACHINE), V12,
        "a cached block a hit revives stays on the free list: a held block can be evicted"),
    Mutant("v12-hit-without-the-token-comparison", PROPERTY, (
        Edit(POOL, "            if block is None or not self._link[block].extends(link, own):",
             "            if block is None:"),),
        (COLLISION, OTHER_PREFIX, MACHINE), V12,
        "a hit trusts the hash alone: a collision serves another prefix's K/V"),
    Mutant("v12-links-matched-by-identity-alone", PROPERTY, (
        Edit(POOL, "            if mine is None or parent is None or mine.tokens != parent.tokens:\n",
             "            if True:  # a link made before its parent's eviction matches nothing\n"),),
        (AGAIN,), V12,
        "a block sealed while its prefix sat in a block since evicted is never found again, and "
        "holds its hash against the prefix's next registration"),
    Mutant("v12-full-hit-covers-the-last-token", PROPERTY, (
        Edit(POOL, "        for end in range(size, len(tokens), size):",
             "        for end in range(size, len(tokens) + 1, size):"),),
        (BOUNDARY, SHORT, MACHINE), V12,
        "a prompt cached to its end hits completely and leaves no token to compute logits from"),
    Mutant("v12-evicted-block-keeps-its-hash", PROPERTY, (
        Edit(POOL, "        if block in self._hash:\n",
             "        if False:  # it stays findable\n"),),
        (LRU, MACHINE), V12,
        "a cached block handed out again keeps its hash: a hit serves K/V its new owner wrote"),
    Mutant("v12-blocks-freed-head-first", PROPERTY, (
        Edit(POOL, "        for block in reversed(table):", "        for block in table:"),),
        (LRU, MACHINE), V12,
        "a request's blocks come free head first, so its shareable head is evicted first"),
    Mutant("v12-duplicate-block-registered-again", PROPERTY, (
        Edit(POOL, "            if holder is None:", "            if True:"),),
        (TWICE, MACHINE), V12,
        "a second block with a registered hash takes the hash over: one hash names two blocks"),
    Mutant("v12-evicted-block-keeps-its-kv", PROPERTY, (
        Edit(KV, "            self.poison([block])", "            pass"),),
        (POISON,), V12,
        "with poison_free_blocks, an evicted cached block is reused with its old K/V"),
    Mutant("v12-cached-block-poisoned-on-free", PROPERTY, (
        Edit(KV, "if self.pool.ref_count(b) == 1 and self.pool.hash_of(b) is None]",
             "if self.pool.ref_count(b) == 1]"),),
        (POISON,), V12,
        "with poison_free_blocks, a freed block is poisoned though its hash keeps it cached"),
    Mutant("v12-decode-filled-blocks-never-sealed", PROPERTY, (
        Edit(RUNNER, "        logits = super().decode(requests)\n"
                     "        self.kv.seal_filled(requests)\n",
             "        logits = super().decode(requests)\n"),
        Edit(RUNNER, "        tokens = super().decode_tokens(requests)\n"
                     "        self.kv.seal_filled(requests)\n",
             "        tokens = super().decode_tokens(requests)\n"),),
        (CHAT,), V12,
        "a block a decode fills is never registered: a chat's next turn recomputes the answer"),
    Mutant("v12-blocks-past-a-hit-never-sealed", PROPERTY, (
        Edit(RUNNER, "        for request in requests:\n"
                     "            self.kv.seal(request)\n",
             "        for request, h in zip(requests, hits):\n"
                     "            if not h:  # sealed once a decode fills a block\n"
                     "                self.kv.seal(request)\n"),),
        (CHAT,), V12,
        "after a hit, the full blocks the prefill computes stay unregistered until a decode "
        "fills a block: the next request with that prefix misses them"),
    Mutant("v12-cached-blocks-list-held-blocks", PROPERTY, (
        Edit(KV, "        return [b for b in self.pool.free_blocks() if self.pool.hash_of(b) is not "
                 "None]\n",
             "        return [b for b in [*self.pool.free_blocks(), *self.pool.holders()]\n"
             "                if self.pool.hash_of(b) is not None]\n"),),
        (CACHED,), V12,
        "cached_blocks() lists hashed blocks a request holds too: a hit's blocks stay listed"),
    Mutant("v12-cached-blocks-listed-most-recently-freed-first", PROPERTY, (
        Edit(KV, "        return [b for b in self.pool.free_blocks() if",
             "        return [b for b in reversed(self.pool.free_blocks()) if"),),
        (CACHED,), V12,
        "cached_blocks() lists the block evicted last first: the order is not the eviction's"),
]
