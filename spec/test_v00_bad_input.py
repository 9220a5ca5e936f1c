"""v00_full_recompute, page 3 of 3: requests an engine must refuse, and how.

What it introduces: the checks every engine makes before it computes anything
(torchlet.contract.check_request).
Why: an empty prompt or an id outside the vocabulary otherwise ends in an IndexError deep inside
torch, which tells a user nothing; a bool or a float id would be computed silently as 1 or 6, and
generate([5, 6]) (one prompt without its own brackets) would fail somewhere far away.
Core principle: each bad request gets a RequestError whose message names the problem, or the type
it got where a token id or a prompt belongs; Python and numpy integers are token ids, bool is not.
Nothing is generated for any prompt of a call that holds a bad one; that such a call leaves
nothing queued either is spec/test_v03_refusals.py's. (Bad checkpoints: spec/test_checkpoints.py.)
Files: torchlet/contract/values.py (check_prompts, check_request),
implementations/v00_full_recompute/loop.py.
Tradeoff left visible: none; later versions inherit this page unchanged.
"""
import numpy as np
import pytest

import implementations
from spec.support.models.fixtures import tiny_checkpoint
from torchlet.contract import (GENERATE, SAMPLING, GenerationParams, RequestError,
                               UnknownVersionError)

pytestmark = pytest.mark.spec(needs=GENERATE)


@pytest.fixture(scope="module")
def engine(impl):
    return impl.build(tiny_checkpoint("tiny_qwen2"))


BAD = {
    "empty": ([[]], GenerationParams(), "empty prompt"),
    "negative id": ([[5, -1]], GenerationParams(), "outside the vocabulary"),
    "id past vocab": ([[5, 512]], GenerationParams(), "outside the vocabulary"),
    "too long": ([[5] * 250], GenerationParams(max_new_tokens=10), "exceeds the model's context"),
    "zero new tokens": ([[5]], GenerationParams(max_new_tokens=0), "max_new_tokens"),
    "one bad among good": ([[5, 6], []], GenerationParams(), "empty prompt"),
    "a bool id": ([[5, True]], GenerationParams(), "integers, got bool True"),
    "a float id": ([[5, 6.0]], GenerationParams(), "integers, got float 6.0"),
    "a None id": ([[5, None]], GenerationParams(), "integers, got NoneType None"),
    "a string id": ([[5, "6"]], GenerationParams(), "integers, got str '6'"),
    "a nested list": ([[5, [6]]], GenerationParams(), r"integers, got list \[6\]"),
    "a string prompt": (["5 6"], GenerationParams(), "list of token ids, got str"),
    "a prompt without its brackets": ([5, 6], GenerationParams(), "got int 5 where a prompt"),
    "a bare int": (5, GenerationParams(), "list of prompts.*got int 5"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_request_gets_an_error_naming_the_problem(engine, case):
    prompts, params, message = BAD[case]
    with pytest.raises(RequestError, match=message):
        engine.generate(prompts, params)


@pytest.mark.parametrize("case", ["empty", "id past vocab", "too long", "a bool id",
                                  "a nested list", "a string prompt"])
def test_stream_refuses_before_yielding(engine, case):
    prompts, params, message = BAD[case]
    with pytest.raises(RequestError, match=message):
        next(iter(engine.stream(prompts[0], params)))


def test_stream_refuses_a_bare_int_where_its_prompt_belongs(engine):
    with pytest.raises(RequestError, match="list of token ids, got int 5"):
        next(iter(engine.stream(5, GenerationParams())))


def test_numpy_integers_are_token_ids_like_python_ints(engine):
    params = GenerationParams(max_new_tokens=2)
    expected = engine.generate([[5, 6, 7]], params)
    assert engine.generate([np.array([5, 6, 7])], params) == expected
    assert engine.generate([[np.int64(5), np.int32(6), 7]], params) == expected
    assert list(engine.stream(np.array([5, 6, 7], dtype=np.int16), params)) == expected[0]


def test_a_prompt_that_exactly_fills_the_context_is_served(engine):
    out = engine.generate([[5] * 254], GenerationParams(max_new_tokens=2))
    assert len(out[0]) == 2


def test_an_unknown_version_name_lists_the_known_ones():
    with pytest.raises(UnknownVersionError, match="v00_full_recompute"):
        implementations.load("v99_missing")


@pytest.mark.spec(until=SAMPLING)  # this version samples: spec/test_v11_sampling.py
def test_a_greedy_version_refuses_sampling_settings_by_name(impl, engine):
    """Before v11 every version takes the argmax: a request that asks to sample is refused with
    a message that names the setting and the capability it needs, not decoded greedily."""
    with pytest.raises(RequestError, match=r"temperature=0\.7 .*`sampling` capability"):
        engine.generate([[5, 6]], GenerationParams(max_new_tokens=2, temperature=0.7))
    with pytest.raises(RequestError, match="top_p"):
        engine.generate([[5, 6]], GenerationParams(max_new_tokens=2, top_p=2.0))
    # the settings that leave greedy decoding greedy are accepted
    assert len(engine.generate([[5, 6]], GenerationParams(max_new_tokens=2, seed=3))[0]) == 2
