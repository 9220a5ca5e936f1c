"""v03_request_states and later: a refused call leaves nothing behind.

What it introduces: refusals that are all or nothing. generate() checks every prompt of the call,
with every limit the version has, before it queues any; add_request and stream refuse before they
queue; a generate interrupted half way takes back what it queued. After any refused call the engine
is as it was: nothing waiting or running, no cache held, and the next good call computes exactly
what a fresh engine computes (the same tokens, from the same token rows through the model).
Why: from v03 on, generate is add_request once per prompt, then steps. Checking each prompt as it
is queued leaves the good prompts before a bad one queued when the call raises; the next call then
computes them too and returns them to no one. From v04 a prompt can be refused for the engine's
own limits (max_step_tokens; max_model_len from v05; a block pool it could never fit from v08),
which check_request alone does not know.
Core principle: check, then act. `_checked` (every refusal, changing nothing) is split from
`_enqueue` (which cannot refuse), so a call is refused whole or served whole. The evidence is
taken from outside where it can be: the token rows of the next good call, metered from the
matmuls, against a fresh engine's.
Files: implementations/v03_request_states/loop.py (add_request, _checked, _enqueue, generate),
the `check` of the K/V memory and of the admission policy that _checked asks:
implementations/v05_decode_lanes/kv.py (LaneKV.check, max_model_len),
implementations/v04_continuous_batching/policy.py (ContinuousBatching.check, max_step_tokens)
and implementations/v08_paged_gqa_py/policy.py (PagedAdmission.check, the pool);
torchlet/contract/values.py (check_request, check_prompts).
Tradeoff left visible: every prompt is checked twice when it is queued (the scheduler re-asks
its policy), a few comparisons bought for keeping Scheduler.add safe to call alone.
"""
import pytest
import torch

from spec.support.watchers.meter import TokenMeter
from spec.support.models.fixtures import tiny_checkpoint
from torchlet.contract import (CHUNKED_PREFILL, CONTINUOUS_BATCHING, DECODE_LANES, PAGED_KV,
                               REQUEST_STATES, GenerationParams, RequestError)

pytestmark = pytest.mark.spec(needs=REQUEST_STATES)

CKPT = tiny_checkpoint("tiny_qwen2")
VOCAB, CONTEXT = CKPT.config.vocab_size, CKPT.config.max_position
# Small limits, so each one can refuse a prompt the others accept. The pool: 2 usable blocks of
# 16 tokens, below what 8 lanes of 40 tokens could hold, so v08 also applies its recompute rule.
STEP_TOKENS, MODEL_LEN, NUM_BLOCKS = 24, 40, 3
GOOD = [7, 8, 9]
GOODS, P = [[7, 8, 9], [11, 12, 13, 14]], GenerationParams(max_new_tokens=4)


def params(n: int) -> GenerationParams:
    return GenerationParams(max_new_tokens=n)


# name: (bad prompt, params, what the message names, the capability that brings the limit).
# Under each case's params GOOD is accepted, so a call [GOOD, bad] would have queued GOOD first.
REFUSALS = {
    "an empty prompt": ([], P, "empty prompt", REQUEST_STATES),
    "an id past the vocabulary": ([5, VOCAB], P, "outside the vocabulary", REQUEST_STATES),
    "a negative id": ([5, -1], P, "outside the vocabulary", REQUEST_STATES),
    "a bool id": ([5, True], P, "got bool", REQUEST_STATES),
    "a float id": ([5, 6.0], P, "got float", REQUEST_STATES),
    "a None id": ([5, None], P, "got NoneType", REQUEST_STATES),
    "a string id": ([5, "6"], P, "got str", REQUEST_STATES),
    "a nested list": ([5, [6, 7]], P, "got list", REQUEST_STATES),
    "a string prompt": ("5 6", P, "got str", REQUEST_STATES),
    "a bare int prompt": (5, P, "got int 5", REQUEST_STATES),
    "zero new tokens": ([5], params(0), "max_new_tokens", REQUEST_STATES),
    "past the model's context": ([5] * (CONTEXT - 6), params(10), "model's context",
                                 REQUEST_STATES),
    "longer than max_step_tokens": ([5] * (STEP_TOKENS + 6), params(1), "max_step_tokens",
                                    CONTINUOUS_BATCHING),
    "longer than max_model_len": ([5] * STEP_TOKENS, params(20), "max_model_len", DECODE_LANES),
    "more than the whole pool": ([5] * 18, params(22), "the pool has only", PAGED_KV),
    "a recompute past max_step_tokens": ([5] * 20, params(10), "could never run again",
                                         PAGED_KV),
}


def options(impl) -> dict:
    caps, opts = impl.capabilities, {}
    if CONTINUOUS_BATCHING in caps:
        opts["max_step_tokens"] = STEP_TOKENS
    if DECODE_LANES in caps:
        opts["max_model_len"] = MODEL_LEN
    if PAGED_KV in caps:
        opts["num_blocks"] = NUM_BLOCKS
    # float64: Triton versions take their PyTorch path instead of the CPU interpreter
    return {"dtype": torch.float64, **opts}


# Refused only until chunked prefill, which computes a prompt or a recompute in slices.
SLICED = {"longer than max_step_tokens", "a recompute past max_step_tokens"}


def refusals(impl):
    caps = impl.capabilities
    return [(name, *case[:3]) for name, case in REFUSALS.items()
            if case[3] in caps and not (name in SLICED and CHUNKED_PREFILL in caps)]


def metered(engine, prompts=GOODS):
    with TokenMeter(CKPT) as meter:
        tokens = engine.generate(prompts, P)
    return tokens, meter.calls


@pytest.fixture(scope="module")
def fresh(impl):
    """What a good call gives on an engine that never saw a refusal: its tokens and token rows.
    Measured on the second call, once graphs are captured, like every call after the first."""
    engine = impl.build(CKPT, **options(impl))
    engine.generate(GOODS, P)
    return metered(engine)


@pytest.fixture(scope="module")
def engine(impl):
    engine = impl.build(CKPT, **options(impl))
    engine.generate(GOODS, P)  # warm, as `fresh` is
    return engine


def assert_as_fresh(engine, what):
    assert not engine.has_unfinished(), f"{what} left a request queued"
    assert engine.total_cached_tokens() == 0, f"{what} left cache held"


def test_every_refused_generate_leaves_nothing_and_the_next_call_computes_as_if_fresh(
        engine, fresh, impl):
    for name, bad, p, message in refusals(impl):
        with pytest.raises(RequestError, match=message):
            engine.generate([GOOD, bad], p)
        assert_as_fresh(engine, f"generate refusing {name}")
        assert metered(engine) == fresh, f"after refusing {name}, a good call computed more"


def test_every_refused_add_request_queues_nothing(engine, fresh, impl):
    for name, bad, p, message in refusals(impl):
        with pytest.raises(RequestError, match=message):
            engine.add_request(bad, p)
        assert_as_fresh(engine, f"add_request refusing {name}")
    assert metered(engine) == fresh


def test_every_refused_stream_queues_nothing(engine, fresh, impl):
    for name, bad, p, message in refusals(impl):
        with pytest.raises(RequestError, match=message):
            next(iter(engine.stream(bad, p)))
        assert_as_fresh(engine, f"stream refusing {name}")
    assert metered(engine) == fresh


def test_a_generate_argument_that_is_not_a_list_of_prompts_is_refused(engine, fresh):
    for prompts, message in [([5, 6], "where a prompt belongs"), (5, "got int 5"),
                             ("5 6", "got str"), (None, "got NoneType")]:
        with pytest.raises(RequestError, match=message):
            engine.generate(prompts, P)
        assert_as_fresh(engine, f"generate({prompts!r})")
    assert metered(engine) == fresh


def test_a_refused_generate_leaves_a_request_queued_before_it_as_it_was(engine, fresh):
    waiting = engine.add_request(GOODS[0], P)
    before = engine.output(waiting)
    with pytest.raises(RequestError):
        engine.generate([GOODS[1], [5] * CONTEXT], P)
    assert engine.output(waiting) == before
    with TokenMeter(CKPT) as meter:
        while engine.has_unfinished():
            engine.step()
    assert engine.output(waiting).tokens == fresh[0][0]
    # the first pass prefills the waiting request alone: nothing of the refused call joined it
    assert meter.passes()[0][0] == len(GOODS[0])
    assert engine.total_cached_tokens() == 0


def test_a_generate_interrupted_half_way_takes_back_what_it_queued(engine, fresh):
    step, calls = engine.step, []

    def interrupted():  # Ctrl-C after the prefill, with cache held
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return step()

    engine.step = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.generate(GOODS, P)
    finally:
        del engine.step
    assert_as_fresh(engine, "an interrupted generate")
    assert metered(engine) == fresh


# Settings no step could run (the issue's: one eos id as Hugging Face writes it, a bool for an
# int), refused naming the setting before anything is queued (spec/test_v03_request_isolation.py
# draws them at random).
MALFORMED = {"eos_token_ids": 2, "stop_token_ids": 5, "max_new_tokens": True, "ignore_eos": 1}


def test_malformed_settings_are_refused_by_every_call_and_the_next_call_computes_as_if_fresh(
        engine, fresh):
    for name, value in MALFORMED.items():
        bad = GenerationParams(**{name: value})
        for call in (lambda: engine.add_request(GOOD, bad),
                     lambda: engine.generate(GOODS, bad),
                     lambda: next(iter(engine.stream(GOOD, bad)))):
            with pytest.raises(RequestError, match=f"^{name} must be"):
                call()
            assert_as_fresh(engine, f"refusing {name}={value!r}")
    assert metered(engine) == fresh
