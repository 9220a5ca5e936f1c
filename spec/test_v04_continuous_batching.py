"""v04_continuous_batching: requests join and leave the batch at any step.

What it introduces: admission at every step. Requests arrive while others decode; each step,
every running request decodes one token, then waiting requests join first come first served while
the batch stays within `max_running` requests and `max_step_tokens` rows
(build(ckpt, max_running=4, max_step_tokens=64)). A request that finishes leaves the batch at the
step it finishes, and its room goes to the next waiter at the next step.
How prefill and decode share a step: mixed. The runners' last tokens (one row each) and the
joiners' whole prompts go through the model in one ragged pass; decode rows are counted against
the budget first, so running requests are never held back by newcomers.
Why v03 needs it: with static batching a new request waits for the slowest member of the running
batch, and the batch shrinks as its members finish: the engine idles with work waiting.
Core principle: batching is invisible to a request: for any arrival schedule its tokens equal its
solo run. The limits hold at every step, measured by the token meter, not just reported. No
starvation: a request added after requests j (however many are still around) finishes within
sum_j (1 + max_new_tokens_j) + its own max_new_tokens steps, because admission never lets a later
request overtake an earlier one, and every step that holds the head back decodes a token for a
request ahead of it.
Files: implementations/v04_continuous_batching/policy.py against
implementations/v03_request_states/policy.py (StaticBatching: v04 swaps only the policy).
Tradeoff left visible: a long prompt is prefilled whole inside one step, so the decodes sharing
that step wait for it, and a prompt longer than max_step_tokens is refused (chunked prefill would
split it).
"""
from collections import Counter

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import implementations
from spec.support.oracles import decode_ahead as overlap
from spec.support.inputs import strategies as sts
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.watchers.meter import TokenMeter
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.inputs.scenarios import late_arrival
from torchlet.contract import (CHUNKED_PREFILL, CONTINUOUS_BATCHING, DECODE_LANES, GenerationParams,
                               RequestError)

pytestmark = pytest.mark.spec(needs=CONTINUOUS_BATCHING)

CKPT = tiny_checkpoint("tiny_qwen2")
VOCAB = CKPT.config.vocab_size
MAX_LEN = 10


def drive(engine, schedule):
    """Run an arrival schedule [(steps before adding, prompt, params)] to the end. Returns the
    request ids, the number of steps run before each was added, and every step's stats."""
    ids, added_at, log = [], [], []

    def step():
        if engine.step():
            log.append(engine.last_step_stats())

    for gap, prompt, params in schedule:
        for _ in range(gap):
            step()
        added_at.append(len(log))
        ids.append(engine.add_request(prompt, params))
    while engine.has_unfinished():
        step()
    return ids, added_at, log


@pytest.fixture(scope="module")
def solo():
    """Each prompt's tokens alone, from v03 (static batching: a batch of one)."""
    v03 = implementations.load("v03_request_states").build(CKPT, dtype=torch.float64)
    return lambda prompt, params: v03.generate([prompt], params)[0]


@given(schedule=sts.arrival_schedules(VOCAB, max_len=MAX_LEN), max_running=st.integers(1, 4),
       extra_budget=st.integers(0, 12))
# the first request stops at its stop token 34, the second arrives after it has left
@example(schedule=[(0, [3, 3, 3, 173, 3], GenerationParams(max_new_tokens=3, stop_token_ids=(34,))),
                   (3, [5, 6], GenerationParams(max_new_tokens=2))], max_running=2, extra_budget=4)
@pytest.mark.spec(engine_parts=True, until=CHUNKED_PREFILL)  # whole prompts; v15's page: slices
@engine_settings()
def test_for_any_arrival_schedule_each_request_gets_its_solo_tokens_within_the_limits(
        impl, solo, schedule, max_running, extra_budget):
    budget = MAX_LEN + extra_budget
    engine = impl.build(CKPT, dtype=torch.float64, max_running=max_running,
                        max_step_tokens=budget)
    with TokenMeter(CKPT) as meter:
        ids, added_at, log = drive(engine, schedule)
    prompt_of = {i: p for i, (_, p, _) in zip(ids, schedule)}

    for i, (_, prompt, params) in zip(ids, schedule):
        assert engine.output(i).tokens == solo(prompt, params)

    # The limits, at every step; the rows the model was fed are measured, not taken on trust.
    params_of = {i: params for i, (_, _, params) in zip(ids, schedule)}
    assert_rows_fed(meter.passes(), log, prompt_of, params_of, max_running, impl)
    for s in log:
        assert s.num_running <= max_running and s.num_tokens <= budget
        assert s.num_tokens == len(s.decode_ids) + sum(len(prompt_of[i]) for i in s.prefill_ids)
        if s.waiting_ids:  # nobody waits while the head would fit
            head = len(prompt_of[s.waiting_ids[0]])
            assert s.num_running == max_running or s.num_tokens + head > budget

    finished_at = {i: s.step for s in log for i in s.finished_ids}
    for s in log:  # finished requests have left by the next step
        assert not any(finished_at[i] < s.step for i in s.decode_ids + s.prefill_ids)

    for n, i in enumerate(ids):  # the stated bound: nobody starves
        ahead = sum(1 + params.max_new_tokens for _, _, params in schedule[:n])
        assert finished_at[i] - added_at[n] <= ahead + schedule[n][2].max_new_tokens


def assert_rows_fed(passes, log, prompt_of, params_of, max_running, impl):
    """v04: one mixed pass a step, its rows the step's tokens. From v05 a step is a decode pass
    with one lane per slot in use (idle lanes included, at most max_running) and then a ragged
    prefill pass. From v14 a step also launches the next step's decode: when each request it
    was launched for stops at this step's token, no step reads that pass, computed for nothing."""
    firsts = [p[0] for p in passes]
    if DECODE_LANES not in impl.capabilities:
        assert firsts == [s.num_tokens for s in log]
        return
    made = Counter()
    for s in log:
        if s.decode_ids:
            lanes = firsts.pop(0)
            assert len(s.decode_ids) <= lanes <= max_running
        if s.prefill_ids:
            assert firsts.pop(0) == sum(len(prompt_of[i]) for i in s.prefill_ids)
        batch = s.decode_ids + s.prefill_ids
        made.update(batch)
        launched = [i for i in batch if overlap.ahead(impl, made[i], params_of[i])]
        if launched and set(launched) <= set(s.finished_ids):
            lanes = firsts.pop(0)
            assert len(launched) <= lanes <= max_running
    assert firsts == []


PROMPT = [17, 5, 300, 42, 99, 8, 250]


@pytest.mark.spec(until=DECODE_LANES)  # from v05 decode runs in a lane-shaped pass of its own
def test_prefill_and_decode_share_one_mixed_pass(impl):
    engine = impl.build(CKPT, max_running=4, max_step_tokens=64)
    a = engine.add_request(PROMPT, GenerationParams(max_new_tokens=5))
    engine.step()
    b = engine.add_request([9, 8, 7], GenerationParams(max_new_tokens=5))
    with TokenMeter(CKPT) as meter:
        engine.step()
    stats = engine.last_step_stats()
    assert (stats.decode_ids, stats.prefill_ids) == ((a,), (b,))
    assert meter.passes() == [[1 + 3] * CKPT.config.num_layers]  # one pass: A's token, B's prompt


def test_a_late_request_joins_at_the_next_step_instead_of_waiting_for_the_batch(impl):
    a, b, ran = late_arrival(impl.build(CKPT))
    assert ran == [((a,), (b,)), ((a, b), ())] + [((a,), ())] * 3  # compare v03's spec


def test_a_finished_request_leaves_at_its_step_and_its_room_goes_to_the_next_waiter(impl):
    engine = impl.build(CKPT, max_running=1)
    a = engine.add_request(PROMPT, GenerationParams(max_new_tokens=2))
    b = engine.add_request([9, 8, 7], GenerationParams(max_new_tokens=1))
    engine.step()
    engine.step()
    stats = engine.last_step_stats()
    assert (stats.decode_ids, stats.finished_ids, stats.waiting_ids) == ((a,), (a,), (b,))
    engine.step()
    stats = engine.last_step_stats()
    assert (stats.decode_ids, stats.prefill_ids) == ((), (b,))


@pytest.mark.spec(until=CHUNKED_PREFILL)  # v15 slices it
def test_the_token_budget_holds_back_a_prompt_that_would_overflow_the_step(impl):
    engine = impl.build(CKPT, max_running=4, max_step_tokens=10)
    a = engine.add_request(PROMPT, GenerationParams(max_new_tokens=3))
    engine.step()
    big = engine.add_request([5] * 10, GenerationParams(max_new_tokens=1))  # 1 + 10 > 10
    small = engine.add_request([6] * 4, GenerationParams(max_new_tokens=1))
    engine.step()
    stats = engine.last_step_stats()
    # The small one would fit, but it may not overtake the big one ahead of it.
    assert (stats.decode_ids, stats.prefill_ids, stats.waiting_ids) == ((a,), (), (big, small))
    engine.step()  # a finishes
    engine.step()
    assert engine.last_step_stats().prefill_ids == (big,)


@pytest.mark.spec(until=CHUNKED_PREFILL)  # v15 slices it
def test_a_prompt_longer_than_the_step_budget_is_refused_when_added(impl):
    engine = impl.build(CKPT, max_running=2, max_step_tokens=8)
    with pytest.raises(RequestError, match="max_step_tokens"):
        engine.add_request([5] * 9, GenerationParams(max_new_tokens=1))
    assert not engine.has_unfinished()


def test_build_refuses_a_budget_smaller_than_the_running_requests_decode_rows(impl):
    with pytest.raises(ValueError):
        impl.build(CKPT, max_running=8, max_step_tokens=4)
