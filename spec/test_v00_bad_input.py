"""v00_full_recompute, page 3 of 3: requests an engine must refuse, and how.

What it introduces: the checks every engine makes before it computes anything
(torchlet.contract.check_request).
Why: an empty prompt or an id outside the vocabulary otherwise ends in an IndexError deep inside
torch, which tells a user nothing.
Core principle: each bad request gets a RequestError whose message names the problem; nothing is
generated for any prompt of a call that holds a bad one. (Bad checkpoints: spec/test_checkpoints.py.)
Files: torchlet/contract.py (check_request), implementations/v00_full_recompute/engine.py.
Tradeoff left visible: none; later versions inherit this page unchanged.
"""
import pytest

import implementations
from spec.support.models import tiny_checkpoint
from torchlet.contract import GENERATE, GenerationParams, RequestError, UnknownVersionError

pytestmark = pytest.mark.needs(GENERATE)


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
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_request_gets_an_error_naming_the_problem(engine, case):
    prompts, params, message = BAD[case]
    with pytest.raises(RequestError, match=message):
        engine.generate(prompts, params)


@pytest.mark.parametrize("case", ["empty", "id past vocab", "too long"])
def test_stream_refuses_before_yielding(engine, case):
    prompts, params, message = BAD[case]
    with pytest.raises(RequestError, match=message):
        next(iter(engine.stream(prompts[0], params)))


def test_a_prompt_that_exactly_fills_the_context_is_served(engine):
    out = engine.generate([[5] * 254], GenerationParams(max_new_tokens=2))
    assert len(out[0]) == 2


def test_an_unknown_version_name_lists_the_known_ones():
    with pytest.raises(UnknownVersionError, match="v00_full_recompute"):
        implementations.load("v99_missing")
