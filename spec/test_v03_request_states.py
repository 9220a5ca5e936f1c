"""v03_request_states: requests with a lifecycle, driven one step at a time.

What it introduces: a request moves WAITING -> RUNNING -> FINISHED, and says why it finished
(eos, stop id, length, aborted). A scheduler owns the lifecycle and builds each step's rows (a
whole prompt to prefill or a last token to decode); the runner computes the step's tokens, the
sampler it is handed choosing each (greedy here). The engine is driven step-wise: add_request,
step, output, abort, has_unfinished.
Why v02 needs it: v02's generate is one closed loop over a fixed list of prompts. A server gets
requests at any time, streams their tokens, and cancels some; that needs per-request state the
caller can read between steps, and a place (the scheduler) where the decision who runs lives.
Core principle: only legal transitions, checked by a Hypothesis state machine over random
add / step / abort sequences; a finished output is frozen; whatever a request held (its cache,
its queue place) is freed the moment it finishes or is aborted; step-wise driving gives
exactly generate's tokens.
Files: implementations/v03_request_states/{request.py, scheduler.py, policy.py, runner.py,
sampler.py, loop.py} against implementations/v02_kv_cache/{runner.py, loop.py} (the model and the cache
are v02's, unchanged).
Tradeoff left visible: static batching. A batch runs until its slowest request finishes; a
request added meanwhile waits even though the engine has room (v04 fixes this).
"""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, \
    run_state_machine_as_test

import implementations
from spec.support.inputs import strategies as sts
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.watchers.meter import TokenMeter
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.decode_ahead import unread
from spec.support.inputs.scenarios import late_arrival, run_alone
from torchlet.contract import (CONTINUOUS_BATCHING, DECODE_LANES, REQUEST_STATES, FinishReason,
                               GenerationParams, RequestError, RequestState)

pytestmark = pytest.mark.spec(needs=REQUEST_STATES)

W, R, F = RequestState.WAITING, RequestState.RUNNING, RequestState.FINISHED
LEGAL = {W: {W, R, F}, R: {R, F}, F: {F}}  # W -> F in one step: aborted, or done at prefill
CKPT = tiny_checkpoint("tiny_qwen2")
VOCAB = CKPT.config.vocab_size


class Lifecycle(RuleBasedStateMachine):
    def __init__(self, impl):
        super().__init__()
        self.impl = impl
        # float64: the lifecycle is the point here, and Triton versions then take their PyTorch
        # path instead of the CPU interpreter.
        self.engine = impl.build(CKPT, dtype=torch.float64)
        self.seen = {}      # request id -> last RequestOutput observed
        self.aborted = set()

    def _observe(self, out):
        before = self.seen.get(out.request_id)
        if before is not None:
            assert out.state in LEGAL[before.state], f"{before.state} -> {out.state}"
            if before.state is F:
                assert out == before, "a finished request's output changed"
            assert out.tokens[:len(before.tokens)] == before.tokens, "tokens were rewritten"
        self.seen[out.request_id] = out

    @rule(prompt=sts.prompts(VOCAB, max_len=8), params=sts.params(max_new=4))
    def add(self, prompt, params):
        request_id = self.engine.add_request(prompt, params)
        assert request_id not in self.seen
        out = self.engine.output(request_id)
        assert (out.state, out.tokens, out.prompt) == (W, [], prompt)
        self.seen[request_id] = out

    @rule()
    def step(self):
        touched = self.engine.step()
        for out in touched:
            assert out == self.engine.output(out.request_id)
            self._observe(out)

    @precondition(lambda self: self.seen)
    @rule(data=st.data())
    def abort(self, data):
        request_id = data.draw(st.sampled_from(sorted(self.seen)))
        was = self.engine.output(request_id)
        self.engine.abort(request_id)
        if was.state is not F:
            self.aborted.add(request_id)
        self._observe(self.engine.output(request_id))

    @invariant()
    def every_output_is_legal_and_holds_only_what_it_should(self):
        held = 0
        for request_id, before in list(self.seen.items()):
            out = self.engine.output(request_id)
            self._observe(out)
            cached = self.engine.num_cached_tokens(request_id)
            if out.state is R:
                assert out.tokens and out.finish_reason is None
                # all but the last token; from v14 that one too, its decode launched ahead
                assert cached == len(out.prompt) + len(out.tokens) - 1 + unread(self.impl)
            else:
                assert cached == 0, f"a {out.state.value} request holds {cached} cached tokens"
            if out.state is W:
                assert out.tokens == [] and out.finish_reason is None
            if out.state is F:
                assert (out.finish_reason is FinishReason.ABORTED) == (request_id in self.aborted)
                if out.finish_reason is not FinishReason.ABORTED:
                    assert out.tokens, "a request finished by a step made a token"
            held += cached
        assert self.engine.total_cached_tokens() == held
        assert self.engine.has_unfinished() == any(o.state is not F for o in self.seen.values())


@pytest.mark.spec(engine_parts=True)
def test_random_add_step_abort_sequences_make_only_legal_transitions(impl):
    run_state_machine_as_test(lambda: Lifecycle(impl), settings=engine_settings())


PROMPT = [17, 5, 300, 42, 99, 8, 250]


def first_tokens(engine, n=6):
    return engine.generate([PROMPT], GenerationParams(max_new_tokens=n))[0]


def test_each_finish_reason_names_what_ended_the_request(impl):
    engine = impl.build(CKPT)
    tokens = first_tokens(engine)
    t = next(t for t in tokens if t != tokens[0])  # a token that first appears later on
    at = tokens.index(t) + 1
    eos = run_alone(engine, GenerationParams(max_new_tokens=6, eos_token_ids=(t,)))
    assert (eos.state, eos.finish_reason, eos.tokens) == (F, FinishReason.EOS, tokens[:at])
    stop = run_alone(engine, GenerationParams(max_new_tokens=6, stop_token_ids=(t,)))
    assert (stop.finish_reason, stop.tokens) == (FinishReason.STOP, tokens[:at])
    length = run_alone(engine, GenerationParams(max_new_tokens=6, eos_token_ids=(t,),
                                                ignore_eos=True))
    assert (length.finish_reason, length.tokens) == (FinishReason.LENGTH, tokens)


def test_a_finished_request_output_never_changes_while_others_run(impl):
    engine = impl.build(CKPT)
    short = engine.add_request(PROMPT, GenerationParams(max_new_tokens=1))
    long = engine.add_request([9, 8, 7], GenerationParams(max_new_tokens=5))
    engine.step()
    done = engine.output(short)
    assert done.state is F and done.finish_reason is FinishReason.LENGTH
    while engine.has_unfinished():
        engine.step()
        assert engine.output(short) == done
    engine.abort(short)  # aborting a finished request changes nothing
    assert engine.output(short) == done
    assert len(engine.output(long).tokens) == 5


def test_step_stats_count_the_rows_each_request_brought_and_the_tokens_it_got(impl):
    """Checked against what the outputs show: a prefilled request got its first token, a
    decoded one one more token; and, where every row is a request's (before decode lanes),
    against the rows the model was fed."""
    engine = impl.build(CKPT)
    prompts = {engine.add_request(p, GenerationParams(max_new_tokens=n)): p
               for p, n in ((PROMPT, 3), ([9, 8, 7], 1), ([4, 4], 4))}
    before = {i: len(engine.output(i).tokens) for i in prompts}
    while engine.has_unfinished():
        with TokenMeter(CKPT) as meter:
            engine.step()
        stats = engine.last_step_stats()
        grew = {i for i in prompts if len(engine.output(i).tokens) == before[i] + 1}
        assert set(stats.prefill_ids) | set(stats.decode_ids) == grew
        assert stats.num_prefill_tokens == sum(len(prompts[i]) for i in stats.prefill_ids)
        assert stats.num_decode_tokens == len(stats.decode_ids)
        assert stats.num_running == len(grew)
        assert stats.num_tokens == stats.num_prefill_tokens + len(stats.decode_ids)
        if DECODE_LANES not in impl.capabilities:
            assert meter.total(layer=0) == stats.num_tokens
        before = {i: len(engine.output(i).tokens) for i in prompts}


def test_aborting_a_running_request_frees_its_cache_and_drops_it_from_later_steps(impl):
    engine = impl.build(CKPT)
    a = engine.add_request(PROMPT, GenerationParams(max_new_tokens=5))
    b = engine.add_request([9, 8, 7], GenerationParams(max_new_tokens=5))
    engine.step()
    ahead = unread(impl)  # from v14 the first token's K/V is stored when the step returns
    assert engine.num_cached_tokens(a) == len(PROMPT) + ahead
    assert engine.total_cached_tokens() == len(PROMPT) + 3 + 2 * ahead
    engine.abort(a)
    out = engine.output(a)
    assert (out.state, out.finish_reason, len(out.tokens)) == (F, FinishReason.ABORTED, 1)
    assert engine.num_cached_tokens(a) == 0 and engine.total_cached_tokens() == 3 + ahead
    engine.step()
    stats = engine.last_step_stats()
    assert a not in stats.decode_ids + stats.prefill_ids and b in stats.decode_ids
    assert engine.output(a) == out


def test_aborting_a_waiting_request_frees_its_place_in_the_queue(impl):
    engine = impl.build(CKPT, **({"max_running": 1} if CONTINUOUS_BATCHING in impl.capabilities
                                 else {}))
    a = engine.add_request(PROMPT, GenerationParams(max_new_tokens=3))
    engine.step()
    b = engine.add_request([9, 8, 7], GenerationParams(max_new_tokens=3))
    engine.step()
    assert engine.output(b).state is W  # v03: a batch is running; v04: max_running is 1
    engine.abort(b)
    out = engine.output(b)
    assert (out.state, out.finish_reason, out.tokens) == (F, FinishReason.ABORTED, [])
    while engine.has_unfinished():
        engine.step()
        stats = engine.last_step_stats()
        assert b not in stats.prefill_ids + stats.decode_ids + stats.waiting_ids
    assert engine.output(a).finish_reason is FinishReason.LENGTH
    assert engine.total_cached_tokens() == 0


def test_unknown_request_ids_are_refused(impl):
    engine = impl.build(CKPT)
    with pytest.raises(RequestError):
        engine.output(12345)
    with pytest.raises(RequestError):
        engine.abort(12345)


def test_add_request_refuses_what_check_request_refuses_and_queues_nothing(impl):
    engine = impl.build(CKPT)
    with pytest.raises(RequestError):
        engine.add_request([], GenerationParams())
    with pytest.raises(RequestError):
        engine.add_request([VOCAB], GenerationParams())
    assert not engine.has_unfinished() and engine.step() == []


@pytest.fixture(scope="module")
def engines(impl):
    return (impl.build(CKPT, dtype=torch.float64),
            implementations.load("v02_kv_cache").build(CKPT, dtype=torch.float64))


@given(batch=sts.prompt_batches(VOCAB), params=sts.params(vocab=VOCAB))
@engine_settings()
def test_stepwise_driving_gives_the_tokens_of_generate_and_of_v02(engines, batch, params):
    engine, v02 = engines
    ids = [engine.add_request(p, params) for p in batch]
    while engine.has_unfinished():
        engine.step()
    stepwise = [engine.output(i).tokens for i in ids]
    assert stepwise == engine.generate(batch, params) == v02.generate(batch, params)


@pytest.mark.spec(until=CONTINUOUS_BATCHING)  # which admits B at once: spec/test_v04_*
def test_static_batching_makes_a_late_request_wait_for_the_whole_batch(impl):
    """The tradeoff: B arrives one step after A and waits until A, which makes 6 tokens, has
    finished, though nothing limits the batch's size."""
    a, b, ran = late_arrival(impl.build(CKPT))
    assert ran == [((a,), ())] * 5 + [((), (b,)), ((b,), ())]
