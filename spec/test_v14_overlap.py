"""v14_overlap: the host prepares the next step while the GPU computes this one.

What it introduces: a step that launches its passes, starts copying its tokens to the host,
launches the next step's decode for every request that may continue, that decode's token ids
copied on the device from this step's draws, and only then waits for its tokens. A request
whose next token is its last gets no decode ahead; one that stops at a stop token has had one
row computed for nothing, whose token is never read, and its blocks are freed as before. A
block a decode ahead fills is sealed for the prefix cache once its tokens are read.

Why v13 needs it: every v13 step is host work, then GPU work, then a wait. The GPU waits while
the host schedules, writes the lanes' inputs and postprocesses; the host waits while the GPU
computes. At batch 256 (context 1,024) a v13 step on the H200 is 4.24 ms, of which 2.51 ms are
kernels (docs/perf-notes.md).

Core principle: the host may run ahead of what it has read, never ahead of what it knows. What a
decode ahead needs from the step before (each lane's token) stays on the device; what the host
decides (who continues, which blocks) it decides from what it has read, and what needs the
tokens themselves (a block's hash) waits for them. Tokens are v13's: the golden, sampling,
preemption and prefix-cache specs of every earlier page run against v14 with overlap on; the
specs that watch one step() call's own work (marked one_step_per_call) are the ones v14 skips,
since its calls hold the next step's decode. This page watches that decode from outside: the
K/V it stores, the inputs it reads, the order of the copies on the step's way out, the rows a
later prefill is spared, and that the step after it preempts none of the requests it ran for.

Files to compare: implementations/v14_overlap/loop.py (OverlapEngine: _decode_ahead,
start_read) against implementations/v03_request_states/loop.py (the step it reorders),
implementations/v08_paged_gqa_py/scheduler.py (PreemptingScheduler: preemption, which a step
ahead leaves to the next step in order) and implementations/v12_prefix_cache/kv.py
(seal_filled); implementations/v14_overlap/inputs.py (OverlapInputs) against
implementations/v08_paged_gqa_py/inputs.py (PagedInputs, the lanes' buffers a drawn token is
copied into on the device).

Tradeoff left visible: between steps a running request has cached its last token too, so
num_cached_tokens counts one more than v13's; a step ahead is skipped when the pool cannot hold
every request's next token (the next step then runs in order, and preempts as v08 does); a
request stopped by a stop token costs one wasted row; on a CPU, where every op runs as it is
dispatched, the order buys nothing.
"""
from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given
from torch.utils._python_dispatch import TorchDispatchMode

import implementations
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.watchers.meter import TokenMeter
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.inputs.scenarios import run_schedule
from spec.test_v08_paged_engine import FAIRNESS_POOL, FAIRNESS_SCHEDULE, solo, tight_runs
from torchlet.contract import OVERLAP, GenerationParams, RequestState

pytestmark = pytest.mark.spec(needs=OVERLAP)

CKPT = tiny_checkpoint("tiny_qwen2")
F64 = torch.float64
PROMPTS = [[17, 5, 300, 42, 99, 8, 250, 3, 9], [4, 4, 4, 4, 4], [40, 41, 42]]
BLOCK = 4


def build(version, **options):
    return version.build(CKPT, dtype=F64, block_size=BLOCK, max_lanes=4, **options)


@functools.lru_cache(maxsize=None)
def v13():
    return implementations.load("v13_fused")


def started(engine, prompts=PROMPTS, max_new=8, steps=2):
    ids = [engine.add_request(p, GenerationParams(max_new_tokens=max_new)) for p in prompts]
    for _ in range(steps):
        engine.step()
    return ids


def test_when_a_step_returns_the_next_decode_has_stored_each_requests_last_token(impl):
    """The cache read back through the contract: after each step v14 holds the K/V of every
    running request's last token, which v13 stores only at its next step, and the K/V equals
    what v13 stores there."""
    ahead, in_order = build(impl), build(v13())
    for steps in (1, 2, 3):
        a_ids, o_ids = started(ahead, steps=steps), started(in_order, steps=steps)
        for a, o in zip(a_ids, o_ids):
            out = ahead.output(a)
            assert out.tokens == in_order.output(o).tokens and out.state is RequestState.RUNNING
            known = len(out.prompt) + len(out.tokens)
            assert ahead.num_cached_tokens(a) == known
            assert in_order.num_cached_tokens(o) == known - 1
        before = [ahead.cached_kv(a) for a in a_ids]
        in_order.step()  # v13 now stores what v14 had stored ahead
        for kv, o in zip(before, o_ids):
            for (k, v), (k13, v13_) in zip(kv, in_order.cached_kv(o)):
                torch.testing.assert_close(k, k13[:k.shape[0]])
                torch.testing.assert_close(v, v13_[:v.shape[0]])
        for engine, ids in ((ahead, a_ids), (in_order, o_ids)):
            for i in ids:
                engine.abort(i)


def test_with_overlap_off_each_step_runs_in_order_as_v13s_does(impl):
    """overlap=False: after a step the running requests have cached all but their last token,
    the decode buffers hold the step's own inputs, and the tokens are the same."""
    ahead, in_order = build(impl), build(impl, overlap=False)
    a_ids, o_ids = started(ahead), started(in_order)
    fed = in_order.decode_buffers()["token_ids"]
    for a, o in zip(a_ids, o_ids):
        out = in_order.output(o)
        assert out.tokens == ahead.output(a).tokens
        assert in_order.num_cached_tokens(o) == len(out.prompt) + len(out.tokens) - 1
        assert int(fed[in_order.lane_of(o)]) == out.tokens[-2]  # fed by this step, not the next


def test_the_decode_ahead_feeds_each_lane_its_requests_last_token_at_the_next_position(impl):
    """decode_buffers() after a step, the tensors they were at build, hold the inputs of the
    decode launched ahead: each running request's lane carries the token the step just
    returned, at the position after the tokens before it."""
    engine = build(impl)
    at_build = {name: t.data_ptr() for name, t in engine.decode_buffers().items()}
    ids = started(engine)
    buffers = engine.decode_buffers()
    assert {name: t.data_ptr() for name, t in buffers.items()} == at_build  # written in place
    for i in ids:
        out, lane = engine.output(i), engine.lane_of(i)
        known = len(out.prompt) + len(out.tokens)
        assert int(buffers["token_ids"][lane]) == out.tokens[-1]
        assert int(buffers["positions"][lane]) == known - 1


class CopyLog(TorchDispatchMode):
    """Every copy_ a step dispatches: (destination's storage address, the values it holds)."""

    def __init__(self):
        super().__init__()
        self.copies: list[tuple[int, list]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.copy_.default:
            dst = args[0]
            self.copies.append((dst.untyped_storage().data_ptr(), dst.flatten().tolist()))
        return out


def test_a_step_copies_its_tokens_out_before_it_writes_the_next_decodes_inputs(impl):
    """The order in which one step dispatches: a copy that holds exactly the tokens this step
    returns, then the writes into the decode buffers of the step ahead. On a GPU the copy is
    then in the stream before the next step's work, so waiting for it does not wait for that."""
    engine = build(impl)
    started(engine, steps=1)
    token_ids = engine.decode_buffers()["token_ids"].untyped_storage().data_ptr()
    with CopyLog() as log:
        outputs = engine.step()
    returned = [o.tokens[-1] for o in outputs]
    assert len(set(returned)) > 1, "the spec needs tokens that tell the requests apart"
    read = [n for n, (dst, values) in enumerate(log.copies)
            if values == returned and dst != token_ids]
    writes = [n for n, (dst, _) in enumerate(log.copies) if dst == token_ids]
    assert read, f"no copy of the step's tokens {returned}: {log.copies}"
    assert writes, "the step wrote no decode inputs for the step ahead"
    assert read[0] < writes[0], "the decode ahead was set up before the tokens were copied out"


def test_a_request_at_its_last_token_gets_no_decode_ahead(impl):
    """Its last step writes no decode input: nothing is launched for a token it will never
    need. The request before it ran ahead at each of its other steps."""
    engine = build(impl)
    rid = engine.add_request(PROMPTS[0], GenerationParams(max_new_tokens=3))
    token_ids = engine.decode_buffers()["token_ids"].untyped_storage().data_ptr()
    writes = []
    while engine.has_unfinished():
        with CopyLog() as log:
            engine.step()
        writes.append(sum(dst == token_ids for dst, _ in log.copies))
    assert engine.output(rid).state is RequestState.FINISHED and len(writes) == 3
    assert writes[0] > 0 and writes[1] > 0 and writes[2] == 0, writes


def test_a_request_stopped_by_a_stop_token_or_aborted_leaves_the_others_their_tokens(impl):
    """On a poisoned pool with little room: one request stops at a stop token v13 showed it
    draws, one is aborted mid-run, each after rows were computed ahead for it. Every request's
    tokens are its solo ones (up to where it stopped), and every block comes free."""
    free = solo(tuple(PROMPTS[1]), GenerationParams(max_new_tokens=8))
    stop = next(t for k, t in enumerate(free) if k >= 2 and t not in free[:k])
    engine = impl.build(CKPT, dtype=F64, block_size=BLOCK, max_lanes=3, num_blocks=12,
                        poison_free_blocks=True)
    plain = GenerationParams(max_new_tokens=8)
    stopping = GenerationParams(max_new_tokens=8, stop_token_ids=(stop,))
    ids = [engine.add_request(PROMPTS[0], plain), engine.add_request(PROMPTS[1], stopping),
           engine.add_request(PROMPTS[2], plain)]
    for _ in range(3):
        engine.step()
    engine.abort(ids[0])  # the first row of the step ahead: the others' rows move up
    while engine.has_unfinished():
        engine.step()
    assert engine.output(ids[0]).tokens == solo(tuple(PROMPTS[0]), plain)[:3]
    assert engine.output(ids[1]).tokens == free[:free.index(stop) + 1]
    assert engine.output(ids[2]).tokens == solo(tuple(PROMPTS[2]), plain)
    stats = engine.pool_stats()
    assert stats["num_free"] == stats["num_usable"] and stats["num_used"] == 0


@given(run=tight_runs())
@engine_settings()
def test_on_a_tight_poisoned_pool_any_arrival_schedule_gets_its_solo_tokens(impl, run):
    """v08's property over v14's steps: arrivals mid-run, stop tokens, preemption (a step ahead
    is skipped when blocks run short), every block nobody holds NaN. Each request gets its solo
    tokens and every block comes free."""
    schedule, pool = run
    engine = impl.build(CKPT, dtype=F64, poison_free_blocks=True, **pool)
    ids = run_schedule(engine, schedule)
    for i, (_, prompt, params) in zip(ids, schedule):
        assert engine.output(i).tokens == solo(tuple(prompt), params)
    stats = engine.pool_stats()
    assert stats["num_free"] == stats["num_usable"] and stats["num_used"] == 0


def decoded_ahead(engine, ids) -> list[int]:
    """The running requests whose next token a decode launched ahead computes: the decode
    inputs of its lane hold its last token at the position after its history."""
    buffers, out = engine.decode_buffers(), []
    for i in ids:
        o = engine.output(i)
        if o.state is RequestState.RUNNING:
            lane, known = engine.lane_of(i), len(o.prompt) + len(o.tokens)
            fed = int(buffers["token_ids"][lane]), int(buffers["positions"][lane])
            if fed == (o.tokens[-1], known - 1):
                out.append(i)
    return out


def test_a_step_after_a_decode_ahead_preempts_none_of_the_requests_that_decode_ran_for(impl):
    """The decode launched ahead took the blocks of its requests' next tokens, so the step that
    reads them needs no block for them and preempts none of them: v08's preemption run anyway
    would throw a computed token away and recompute the request. On v08's fairness schedule the
    pool runs short: steps run in order then, and those still preempt."""
    engine = impl.build(CKPT, dtype=F64, use_graphs=False, **FAIRNESS_POOL)
    ids, preempted, ahead_steps = [], [], 0

    def step():
        nonlocal ahead_steps
        ahead = decoded_ahead(engine, ids)
        running = [i for i in ids if engine.output(i).state is RequestState.RUNNING]
        engine.step()
        thrown = [i for i in running if engine.output(i).state is RequestState.WAITING]
        assert not set(thrown) & set(ahead), f"preempted {thrown}, decoded ahead {ahead}"
        preempted.extend(thrown)
        ahead_steps += bool(ahead)
    for gap, prompt, n in FAIRNESS_SCHEDULE:
        for _ in range(gap):
            step()
        ids.append(engine.add_request(prompt, GenerationParams(max_new_tokens=n)))
    while engine.has_unfinished():
        step()
    assert preempted and ahead_steps > 0, (preempted, ahead_steps)
    for i, (_, prompt, n) in zip(ids, FAIRNESS_SCHEDULE):
        assert engine.output(i).tokens == solo(tuple(prompt), GenerationParams(max_new_tokens=n))


def rows_of_a_prefill_after(engine, first, n):
    """Generate n tokens for `first`, then prefill `first` + its first n - 1 tokens (one token
    asked: no decode ahead); the rows each layer was fed by that prefill."""
    rid = engine.add_request(first, GenerationParams(max_new_tokens=n))
    while engine.has_unfinished():
        engine.step()
    follow = first + engine.output(rid).tokens[:n - 1]
    engine.add_request(follow, GenerationParams(max_new_tokens=1))
    with TokenMeter(CKPT) as meter:
        engine.step()
    return meter.passes(), len(follow)


def test_a_block_filled_by_a_decode_ahead_is_sealed_and_spares_a_later_prefill_its_rows(impl):
    """A 9-token prompt's third and fourth blocks are filled by decodes (positions 8 to 15). A
    request whose prompt is that sequence finds all four blocks cached, as with v13: 16 of its 17
    rows are spared. Sealed before its tokens were read, a block would hash a stand-in for the
    token the decode ahead drew (the last known one: at position 15 it is not the drawn one) and
    miss."""
    rows, length = rows_of_a_prefill_after(build(impl), PROMPTS[0], 9)
    expected, _ = rows_of_a_prefill_after(build(v13()), PROMPTS[0], 9)
    assert length == 17 and rows == expected == [[1] * CKPT.config.num_layers]
