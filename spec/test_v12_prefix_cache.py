"""v12_prefix_cache, the engine: shared prompt prefixes computed once.

What it introduces: build(ckpt, prefix_cache=True, block_hash=None). A prompt's leading full
blocks that an earlier request computed (found by a chain of block hashes, confirmed by comparing
token ids) are shared by reference count instead of computed; the prefill computes only the rows
after them (forward_prefill_cached: the new rows attend over the shared prefix read back from the
cache). Blocks whose count falls to 0 stay cached and evictable, least recently freed first.
prefix_cache_stats() reports queried tokens, hit tokens and evictions, and cached_blocks() names
the blocks no request holds that keep their K/V, the next to be evicted first; prefix_cache=False
is v11's engine. The pool alone, with its state machine, is page 1 (test_v12_block_pool.py).

Why v11 needs it: requests that share a system prompt recompute the same K/V over and over.

Core principle: the cache changes what is computed, never what is generated. Each request's
tokens equal the oracle's, greedy and seeded, with the cache on and off, under any arrival
schedule of requests that share prefixes of every length, through preemption under a tight,
poisoned pool, and with a hash so weak that every block collides. The saving is measured from the
matmuls (spec/support/watchers/meter.py): a prefill feeds every layer exactly the prompt tokens the cache
did not hold, and every full block is shareable once its K/V is written, whether a prefill (past
a hit or not) or a decode wrote it: each turn of a chat computes only the rows the turn before
did not write. Sharing is read from the tensors the decode step reads: two requests with a common
prefix name the same physical blocks for it, and their first differing block is private. At
least a prompt's last token is always computed, so a prompt the cache holds whole still gets its
first token's logits (nano-vllm's bug #144).

Files to compare: implementations/v12_prefix_cache/{kv.py, runner.py, model.py}
against implementations/v08_paged_gqa_py/kv.py,
implementations/v07_cuda_graph/runner.py (the runner PrefixRunner extends) and
implementations/v10_triton_paged_gqa/model.py (the memory ContextAttention extends).

Tradeoff left visible: two requests with the same prefix admitted in the same step both compute
it (a block is registered only once its K/V is written); the tail of a partial last block is
never shared; and a hit still costs a token comparison per shared block. On CPU these specs run
in float64, where v09's layers fall back to PyTorch (no interpreter).
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from spec.support.oracles import sampling_oracle as oracle
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.watchers.meter import TokenMeter
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.prompts import screened
from spec.support.inputs.scenarios import run_schedule
from torchlet.contract import PREFIX_CACHE, GenerationParams, RequestState

pytestmark = pytest.mark.spec(needs=PREFIX_CACHE)

FIXTURE = "tiny_llama"
CKPT = tiny_checkpoint(FIXTURE)
DTYPE = torch.float64
BLOCK = 4


def build(impl, **options):
    return impl.build(CKPT, dtype=DTYPE, block_size=BLOCK, **options)


def cases():
    """(prompt, params of a request, its oracle tokens): greedy screened prompts and the seeded
    golden cases. A prompt cut at j of its oracle tokens continues with the tokens after j."""
    greedy = [(p, GenerationParams(), tuple(ref.tokens[:oracle.HORIZON]))
              for p, ref in screened(FIXTURE)[:2]]
    seeded = [(p, oracle_params(s, seed), t) for p, s, seed, t in oracle.golden_cases(FIXTURE)[:3]]
    return greedy + seeded


def oracle_params(settings, seed):
    return GenerationParams(temperature=settings.temperature, top_k=settings.top_k,
                            top_p=settings.top_p, min_p=settings.min_p, seed=seed)


def request(case: int, cut: int, n: int):
    """The prompt of case `case` followed by its first `cut` oracle tokens, n tokens asked, and
    the n tokens the oracle continues with."""
    prompt, params, tokens = cases()[case]
    cut = min(cut, len(tokens) - 1)
    n = min(n, len(tokens) - cut)
    asked = GenerationParams(**{**params.__dict__, "max_new_tokens": n})
    return list(prompt) + list(tokens[:cut]), asked, list(tokens[cut:cut + n])


@pytest.fixture(scope="module")
def engines(impl):
    """The cache on over four lanes and a pool that preempts (poisoned: a free block is NaN),
    the cache off, and the cache on with a hash under which every block collides."""
    tight = dict(max_lanes=4, num_blocks=14, poison_free_blocks=True)
    return {"on": build(impl, **tight), "off": build(impl, prefix_cache=False, **tight),
            "weak hash": build(impl, block_hash=lambda parent, tokens: 7, **tight)}


def run(engine, schedule):
    """schedule: [(steps to wait, prompt, params)]; returns each request's tokens."""
    return [engine.output(i).tokens for i in run_schedule(engine, schedule)]


@st.composite
def schedules(draw):
    n = draw(st.integers(1, 6))
    return [(draw(st.integers(0, 3)), draw(st.integers(0, len(cases()) - 1)),
             draw(st.integers(0, 10)), draw(st.integers(1, 8))) for _ in range(n)]


@engine_settings()
@given(schedule=schedules(), which=st.sampled_from(["on", "off", "weak hash"]))
def test_every_request_gets_the_oracles_tokens_with_the_cache_on_off_or_colliding(
        engines, schedule, which):
    """Requests cut from a few prompts at every length share prefixes of every length: full
    blocks, a prompt that ends on a block boundary, one shorter than a block. Whatever the
    arrivals, the preemptions and the hash, each gets the oracle's tokens."""
    made = [(wait, *request(case, cut, n)) for wait, case, cut, n in schedule]
    out = run(engines[which], [(wait, prompt, params) for wait, prompt, params, _ in made])
    assert out == [expected for *_, expected in made]


def test_requests_that_share_prefixes_preempt_and_evict_and_still_get_the_oracles_tokens(impl):
    """What the property above relies on, on one schedule: over a tighter pool these requests
    hit the cache, preempt and evict cached blocks."""
    engine = build(impl, max_lanes=4, num_blocks=11, poison_free_blocks=True)
    made = [request(c, cut, 8) for cut in (0, 2, 4) for c in range(len(cases()))]
    assert run(engine, [(0, p, q) for p, q, _ in made]) == [e for *_, e in made]
    stats = engine.prefix_cache_stats()
    assert stats["hit_tokens"] > 0 and stats["evictions"] > 0 and engine.num_preemptions > 0


def meter_prefill(engine, prompt, params):
    """Rows each layer was fed by the step that prefilled this request."""
    rid = engine.add_request(prompt, params)
    with TokenMeter(CKPT) as meter:
        engine.step()
    rows = meter.passes()
    while engine.has_unfinished():
        engine.step()
    return rows, engine.output(rid).tokens


@pytest.mark.spec(one_step_per_call=True)
def test_a_prefill_feeds_every_layer_only_the_tokens_the_cache_lacks(impl):
    """A second request with the first's 9-token prompt plus 3 tokens finds 2 blocks (8
    tokens) cached and computes 4 rows at every layer; stats count them."""
    engine = build(impl)
    first = list(range(40, 49))
    rows, _ = meter_prefill(engine, first, GenerationParams(max_new_tokens=1))
    assert rows == [[9] * CKPT.config.num_layers]
    before = engine.prefix_cache_stats()
    rows, tokens = meter_prefill(engine, first + [11, 12, 13], GenerationParams(max_new_tokens=3))
    assert rows == [[4] * CKPT.config.num_layers]
    after = engine.prefix_cache_stats()
    assert after["hit_tokens"] - before["hit_tokens"] == 8
    assert after["queried_tokens"] - before["queried_tokens"] == 12
    off = build(impl, prefix_cache=False)
    assert off.generate([first + [11, 12, 13]], GenerationParams(max_new_tokens=3)) == [tokens]


def test_each_turn_of_a_chat_computes_only_the_rows_the_turn_before_did_not_write(impl):
    """A chat: each turn's prompt is the turn before's prompt, its answer and a new message.
    Every full block is shared once its K/V is written, whoever wrote it: turn 1's decodes
    (its answer fills two blocks), turn 2's prefill past its hit (the new message fills one).
    So each turn computes, at every layer, only the rows past the last full block of what the
    turn before wrote (its prompt and all its answer but the last token, never fed), then one
    row for each of its own tokens but the first, measured from the matmuls."""
    engine, layers = build(impl, use_graphs=False), CKPT.config.num_layers
    prompt, written = [5, 6, 7, 8, 9], 0
    for n, message in ((8, [301, 302, 303, 304]), (2, [311, 312, 313, 314]), (2, [])):
        with TokenMeter(CKPT) as meter:
            [answer] = engine.generate([prompt], GenerationParams(max_new_tokens=n))
        rows = len(prompt) - written // BLOCK * BLOCK + n - 1
        assert [meter.total(i) for i in range(layers)] == [rows] * layers, (len(prompt), written)
        written = len(prompt) + n - 1
        prompt = prompt + answer + message


@pytest.mark.spec(one_step_per_call=True)
def test_a_prompt_the_cache_holds_whole_still_computes_its_last_token(impl):
    """8 tokens, two full blocks, all cached by an earlier request: the prefill computes the
    last block (the hit stops before the last token) and its first token has logits; a prompt
    shorter than a block never hits."""
    engine = build(impl)
    prompt = [7, 8, 9, 10, 11, 12, 13, 14]
    expected = build(impl, prefix_cache=False).generate([prompt], GenerationParams(
        max_new_tokens=4))
    rows, _ = meter_prefill(engine, prompt + [3, 4], GenerationParams(max_new_tokens=1))
    rows, tokens = meter_prefill(engine, prompt, GenerationParams(max_new_tokens=4))
    assert rows == [[BLOCK] * CKPT.config.num_layers] and [tokens] == expected
    rows, _ = meter_prefill(engine, prompt[:3], GenerationParams(max_new_tokens=1))
    rows_again, _ = meter_prefill(engine, prompt[:3], GenerationParams(max_new_tokens=1))
    assert rows == rows_again == [[3] * CKPT.config.num_layers]


def test_requests_with_a_common_prefix_read_the_same_blocks_for_it_and_their_own_after(impl):
    """Read from decode_buffers(), the tensors the step reads: two running requests with a
    common 8-token prefix name the same two physical blocks for it, and different third ones."""
    engine = build(impl, max_lanes=2)
    base = [21, 22, 23, 24, 25, 26, 27, 28]
    a = engine.add_request(base + [1, 2], GenerationParams(max_new_tokens=6))
    engine.step()
    b = engine.add_request(base + [3], GenerationParams(max_new_tokens=6))
    engine.step()
    engine.step()  # both decode now
    tables = engine.decode_buffers()["block_tables"]
    row_a, row_b = tables[engine.lane_of(a)].tolist(), tables[engine.lane_of(b)].tolist()
    assert row_a[:2] == row_b[:2] and row_a[2] != row_b[2]
    assert engine.block_tables()[a][:2] == row_a[:2]  # the report agrees with what is read
    while engine.has_unfinished():
        engine.step()


@pytest.mark.spec(one_step_per_call=True)
def test_two_requests_admitted_in_one_step_with_one_prefix_both_compute_it(impl):
    """Stated, not hidden: a block is registered once its K/V is written, so the same prefix
    prefilled twice in one step is computed twice; the next request then finds it."""
    engine = build(impl)
    base = [31, 32, 33, 34, 35, 36, 37, 38, 39]
    engine.add_request(base, GenerationParams(max_new_tokens=2))
    engine.add_request(base + [40], GenerationParams(max_new_tokens=2))
    with TokenMeter(CKPT) as meter:
        engine.step()
    assert meter.passes() == [[9 + 10] * CKPT.config.num_layers]
    while engine.has_unfinished():
        engine.step()
    rows, _ = meter_prefill(engine, base + [41], GenerationParams(max_new_tokens=1))
    assert rows == [[2] * CKPT.config.num_layers]


def run_to_end(engine, rid) -> list[int]:
    """Steps the engine until it is idle; returns the last block table the request held."""
    held = []
    while engine.has_unfinished():
        engine.step()
        held = engine.block_tables().get(rid, held)
    return held


def test_a_finished_requests_full_blocks_stay_cached_and_are_evicted_in_the_order_listed(impl):
    """cached_blocks(), observed: a request of 13 + 4 tokens writes K/V for 16, four full
    blocks. Once it ends, they are exactly the blocks listed as cached, and no table holds
    them. The same prompt again shares the first three (its table starts with them, its
    prefill computes 1 row of 13) and they leave the list while it holds them. Then one-block
    requests with other prompts, one at a time, take free blocks until every listed block is
    evicted: one at a time, in the order the list gave."""
    engine = build(impl, max_lanes=1, num_blocks=9)
    prompt, params = list(range(50, 63)), GenerationParams(max_new_tokens=4)
    held = run_to_end(engine, engine.add_request(prompt, params))
    full = held[:(len(prompt) + params.max_new_tokens - 1) // BLOCK]
    assert len(full) == 4 and sorted(engine.cached_blocks()) == sorted(full)
    assert engine.block_tables() == {}

    hits = engine.prefix_cache_stats()["hit_tokens"]
    again = engine.add_request(prompt, params)
    engine.step()
    assert engine.prefix_cache_stats()["hit_tokens"] - hits == 3 * BLOCK
    assert engine.block_tables()[again][:3] == full[:3]
    assert not set(full[:3]) & set(engine.cached_blocks()), "a held block is listed as cached"
    run_to_end(engine, again)
    order = engine.cached_blocks()
    assert sorted(order) == sorted(full)

    evictions = engine.prefix_cache_stats()["evictions"]
    for i in range(engine.pool_stats()["num_usable"]):
        engine.generate([[200 + i, 201, 202]], GenerationParams(max_new_tokens=1))
        gone = [b for b in order if b not in engine.cached_blocks()]
        assert engine.prefix_cache_stats()["evictions"] - evictions == len(gone)
        assert [b for b in order if b in gone] == order[:len(gone)], (order, gone)
    assert len(gone) == len(order), "the other prompts never evicted every listed block"


def test_an_aborted_request_leaves_the_blocks_it_shares_to_the_others(impl):
    engine = build(impl, poison_free_blocks=True)
    prompt, params, tokens = cases()[0]
    base = list(prompt) + list(tokens[:6])
    a = engine.add_request(base, GenerationParams(max_new_tokens=8))
    engine.step()
    b = engine.add_request(base + [tokens[6]], GenerationParams(max_new_tokens=4))
    engine.step()
    engine.abort(a)
    while engine.has_unfinished():
        engine.step()
    assert engine.output(b).tokens == list(tokens[7:11])
    assert engine.output(a).state is RequestState.FINISHED


def test_the_cache_off_is_v11s_engine(impl):
    """prefix_cache=False: every prompt token is computed, even a repeat, and nothing is
    counted."""
    engine = build(impl, prefix_cache=False)
    prompt = [7, 8, 9, 10, 11, 12, 13, 14, 15]
    for _ in range(2):
        rows, _ = meter_prefill(engine, prompt, GenerationParams(max_new_tokens=1))
        assert rows == [[9] * CKPT.config.num_layers]
    assert engine.prefix_cache_stats() == {"queried_tokens": 0, "hit_tokens": 0, "evictions": 0}
    assert engine.cached_blocks() == []


@pytest.mark.gpu
def test_on_cuda_shared_prefixes_still_give_the_oracles_tokens(impl):
    """On a GPU, in float32, with the paged kernels and graphs: the schedule that shares,
    preempts and evicts gives every request the oracle's tokens."""
    engine = impl.build(CKPT, device="cuda", dtype=torch.float32, block_size=BLOCK,
                        max_lanes=4, num_blocks=11)
    made = [request(c, cut, 8) for cut in (0, 2, 4) for c in range(len(cases()))]
    assert run(engine, [(0, p, q) for p, q, _ in made]) == [e for *_, e in made]
    stats = engine.prefix_cache_stats()
    assert stats["hit_tokens"] > 0 and engine.num_preemptions > 0
