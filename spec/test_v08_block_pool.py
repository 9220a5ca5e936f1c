"""v08 page contract, part 1: the block pool and block tables.

What it introduces: the KV cache becomes a pool of fixed-size blocks (block_size tokens each). A
request owns an ordered list of physical blocks, its block table, and takes a new block only when
its last one is full. Physical block 0 is never handed out: padding points at it.

Why v07 needs it: v05-v07 reserve one decode lane per request sized for the longest sequence the
engine allows, so a short request holds the memory of a long one and the number of lanes caps the
batch. A pool hands out memory as tokens arrive; a request holds ceil(tokens / block_size) blocks.

Core principle: every usable block is either free or owned by exactly one request, at every
step, and everything comes back when requests end (finish, abort or preemption).

Files to compare: implementations/v05_decode_lanes/kv.py (LaneKV: lane reservation) with
implementations/v08_paged_gqa_py/kv.py (BlockPool).

Tradeoff left visible: the unused tail of a request's last block is still wasted (under one
block per request); a smaller block wastes less but makes tables longer and kernels gather more
pieces. When the pool runs out a request must wait or another must be preempted and recomputed.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

from spec.support.inputs.paged_strategies import pool_shapes
from torchlet.contract import PAGED_KV, ModelConfig, RequestError, TorchletError

# run against the first version to export this very BlockPool (a later one re-exports it)
pytestmark = pytest.mark.spec(needs=PAGED_KV, part="kv", first_with="BlockPool")


# --- exact block ids, in the style of vLLM's block pool tests ---------------------------------

def test_allocation_hands_out_blocks_in_free_list_order_skipping_the_null_block(impl):
    pool = impl.package.BlockPool(8, block_size=4)
    assert pool.free_blocks() == [1, 2, 3, 4, 5, 6, 7]
    assert pool.allocate("a", 6) == [1, 2]
    assert pool.allocate("b", 4) == [3]
    assert pool.free_blocks() == [4, 5, 6, 7]
    assert (pool.num_used, pool.num_free) == (3, 4)


def test_a_token_takes_a_new_block_only_when_the_last_block_is_full(impl):
    pool = impl.package.BlockPool(8, block_size=4)
    pool.allocate("a", 3)
    pool.append_token("a")                      # 4 tokens: block 1 now full
    assert pool.table("a") == [1]
    pool.append_token("a")                      # the 5th token opens block 2
    assert pool.table("a") == [1, 2]
    for _ in range(3):                          # 6..8 fill block 2
        pool.append_token("a")
    assert pool.table("a") == [1, 2]
    assert pool.num_tokens("a") == 8


def test_free_returns_a_requests_blocks_tail_first_to_the_end_of_the_free_list(impl):
    pool = impl.package.BlockPool(8, block_size=4)
    pool.allocate("a", 6)                       # [1, 2]
    pool.allocate("b", 4)                       # [3]
    pool.append_token("b")                      # [3, 4]
    assert pool.free("a") == 2
    assert pool.free_blocks() == [5, 6, 7, 2, 1]
    assert pool.allocate("c", 9) == [5, 6, 7]   # the oldest free blocks go first
    assert pool.free_blocks() == [2, 1]
    pool.free("b")
    assert pool.free_blocks() == [2, 1, 4, 3]
    assert pool.requests() == ["c"]
    assert pool.owners() == {5: "c", 6: "c", 7: "c"}


def test_slot_at_a_position_is_its_physical_block_times_block_size_plus_offset(impl):
    pool = impl.package.BlockPool(8, block_size=4)
    pool.allocate("a", 2)                       # [1]
    pool.allocate("b", 4)                       # [2]
    assert pool.append_token("a") == 1 * 4 + 2  # a's third token
    pool.allocate("c", 1)                       # [3]
    for _ in range(2):
        pool.append_token("a")                  # a's 5th token opens block 4
    assert pool.table("a") == [1, 4]
    assert [pool.slot("a", p) for p in range(5)] == [4, 5, 6, 7, 16]
    assert pool.slot("b", 3) == 2 * 4 + 3
    with pytest.raises(IndexError):
        pool.slot("a", 5)


def test_the_null_block_is_never_handed_out_even_when_the_pool_is_full(impl):
    pool = impl.package.BlockPool(5, block_size=2)
    pool.allocate("a", 3)
    pool.allocate("b", 4)
    assert pool.num_free == 0
    assert sorted(pool.owners()) == [1, 2, 3, 4]


# --- errors ------------------------------------------------------------------------------------

def test_an_exhausted_pool_raises_pool_exhausted_and_changes_nothing(impl):
    pool = impl.package.BlockPool(4, block_size=2)   # 3 usable blocks
    pool.allocate("a", 4)                            # [1, 2]
    assert not pool.can_allocate(3)
    with pytest.raises(impl.package.PoolExhausted) as caught:
        pool.allocate("b", 3)
    assert isinstance(caught.value, TorchletError)
    assert not isinstance(caught.value, RequestError)  # waiting can fix it; the request is fine
    assert pool.free_blocks() == [3] and pool.requests() == ["a"]

    pool.allocate("c", 2)                            # [3], full
    with pytest.raises(impl.package.PoolExhausted):
        pool.append_token("c")
    assert pool.table("c") == [3] and pool.num_tokens("c") == 2


def test_a_request_that_could_never_fit_gets_a_request_error_naming_the_sizes(impl):
    pool = impl.package.BlockPool(4, block_size=2)   # 3 usable blocks = 6 tokens at most
    with pytest.raises(RequestError, match="3 usable blocks"):
        pool.allocate("huge", 7)
    assert pool.num_free == 3
    assert pool.allocate("fits", 6) == [1, 2, 3]


def test_a_request_cannot_hold_two_tables_or_free_blocks_it_does_not_hold(impl):
    pool = impl.package.BlockPool(4, block_size=2)
    pool.allocate("a", 1)
    with pytest.raises(RequestError):
        pool.allocate("a", 1)
    pool.free("a")
    with pytest.raises(RequestError):
        pool.free("a")
    assert pool.num_free == 3


def test_blocks_needed_is_the_ceiling_of_tokens_over_block_size(impl):
    pool = impl.package.BlockPool(4, block_size=16)
    assert [pool.blocks_needed(n) for n in (1, 15, 16, 17, 32, 33)] == [1, 1, 1, 2, 2, 3]


# --- memory accounting -------------------------------------------------------------------------

def test_a_request_holds_the_kv_bytes_of_its_whole_blocks_and_no_more(impl):
    config = ModelConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=3,
                         num_heads=4, num_kv_heads=2, head_dim=4, max_position=512)
    per_token = 2 * 3 * 2 * 4 * 2                     # K and V, layers, kv heads, head_dim, bf16
    assert config.kv_bytes_per_token(torch.bfloat16) == per_token  # the contract's count
    pool = impl.package.BlockPool(40, block_size=16)
    pool.allocate("short", 5)
    pool.allocate("long", 40)
    assert pool.kv_bytes("short", config, torch.bfloat16) == 1 * 16 * per_token
    assert pool.kv_bytes("long", config, torch.bfloat16) == 3 * 16 * per_token
    # A per-request reservation for the model's whole context would hold 512 tokens each.
    assert pool.kv_bytes("short", config, torch.bfloat16) * 32 == 512 * per_token


# --- allocator stress ----------------------------------------------------------------------------

class PoolMachine(RuleBasedStateMachine):
    """Drives a pool the way a scheduler does and keeps its own model of who holds what.

    Requests wait with a token count (prompt, plus what they generated before a preemption), run
    once allocated, grow a token at a time, and leave by finishing or aborting; a preempted
    request frees its blocks and waits to re-allocate for all its tokens."""

    def __init__(self, package):
        super().__init__()
        self.package = package
        self.waiting: dict[int, int] = {}   # request id -> tokens to allocate for
        self.running: dict[int, int] = {}   # request id -> tokens held
        self.next_id = 0

    @initialize(shape=pool_shapes())
    def make_pool(self, shape):
        self.pool = self.package.BlockPool(*shape)
        self.usable = set(range(1, self.pool.num_blocks))

    def _pick(self, group: dict, pick: int) -> int:
        return sorted(group)[pick % len(group)]

    @rule(prompt_len=st.integers(1, 40))
    def add_request(self, prompt_len):
        if self.pool.blocks_needed(prompt_len) > len(self.usable):
            with pytest.raises(RequestError):
                self.pool.allocate(-1, prompt_len)
            return
        self.waiting[self.next_id] = prompt_len
        self.next_id += 1

    @precondition(lambda self: self.waiting)
    @rule(pick=st.integers(0, 1000))
    def allocate_for_prompt(self, pick):
        rid = self._pick(self.waiting, pick)
        tokens = self.waiting[rid]
        if self.pool.can_allocate(tokens):
            table = self.pool.allocate(rid, tokens)
            assert len(table) == self.pool.blocks_needed(tokens)
            self.running[rid] = self.waiting.pop(rid)
        else:
            free_before = self.pool.free_blocks()
            with pytest.raises(self.package.PoolExhausted):
                self.pool.allocate(rid, tokens)
            assert self.pool.free_blocks() == free_before and not self.pool.holds(rid)

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 1000), count=st.integers(1, 20))
    def append_tokens(self, pick, count):
        """Generate up to `count` tokens, one append each, stopping when the pool runs dry."""
        rid = self._pick(self.running, pick)
        for _ in range(count):
            before = self.pool.table(rid)
            if not self.pool.can_append(rid):
                with pytest.raises(self.package.PoolExhausted):
                    self.pool.append_token(rid)
                assert self.pool.table(rid) == before
                assert self.pool.num_tokens(rid) == self.running[rid]
                return
            full = self.running[rid] % self.pool.block_size == 0
            slot = self.pool.append_token(rid)
            self.running[rid] += 1
            table = self.pool.table(rid)
            assert table[:len(before)] == before, "blocks never move"
            assert len(table) == len(before) + full, "a new block only when the last is full"
            assert slot == self.pool.slot(rid, self.running[rid] - 1)

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 1000))
    def finish(self, pick):
        rid = self._pick(self.running, pick)
        held = len(self.pool.table(rid))
        free_before = self.pool.num_free
        assert self.pool.free(rid) == held
        assert self.pool.num_free == free_before + held
        del self.running[rid]

    @precondition(lambda self: self.running or self.waiting)
    @rule(pick=st.integers(0, 1000))
    def abort(self, pick):
        everyone = {**self.waiting, **self.running}
        rid = self._pick(everyone, pick)
        if rid in self.running:
            self.pool.free(rid)
            del self.running[rid]
        else:
            del self.waiting[rid]
        assert not self.pool.holds(rid)

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 1000))
    def preempt(self, pick):
        rid = self._pick(self.running, pick)
        self.pool.free(rid)
        self.waiting[rid] = self.running.pop(rid)   # recompute prompt + generated later

    @invariant()
    def every_usable_block_is_free_or_owned_by_exactly_one_request(self):
        owned = [b for rid in self.pool.requests() for b in self.pool.table(rid)]
        free = self.pool.free_blocks()
        assert len(owned) == len(set(owned)), "a block is owned twice"
        assert not set(owned) & set(free), "a block is both owned and free"
        assert len(free) == len(set(free)), "a block is on the free list twice"
        assert set(owned) | set(free) == self.usable
        assert self.pool.num_used + self.pool.num_free == len(self.usable)
        assert self.pool.num_used == len(owned)

    @invariant()
    def tables_hold_ceil_tokens_over_block_size_blocks(self):
        assert sorted(self.pool.requests()) == sorted(self.running)
        for rid, tokens in self.running.items():
            assert self.pool.num_tokens(rid) == tokens
            assert len(self.pool.table(rid)) == -(-tokens // self.pool.block_size)

    @invariant()
    def the_null_block_is_never_handed_out(self):
        assert 0 not in self.pool.owners()
        assert 0 not in self.pool.free_blocks()

    def teardown(self):
        if not hasattr(self, "pool"):
            return
        for rid in list(self.running):
            self.pool.free(rid)
        assert self.pool.num_free == len(self.usable), "blocks leaked"
        assert sorted(self.pool.free_blocks()) == sorted(self.usable)
        assert self.pool.requests() == []


def test_allocator_under_random_allocate_append_finish_abort_preempt_keeps_every_invariant(impl):
    # Examples come from the active profile (ci: 200, stress: far more); no settings here.
    run_state_machine_as_test(lambda: PoolMachine(impl.package))
