"""v00_full_recompute, page 2 of 3: greedy generation, token for token with the oracle.

What it introduces: `generate(prompts, params)` and `stream(prompt, params)`: greedy decoding that
re-runs the whole sequence through the model for every new token.
Why: it is the slowest correct engine; every later version must produce exactly its tokens.
Core principle: golden tokens come from the oracle (Hugging Face, float64), never from the code
under test. Prompts are screened so that the oracle's top-1/top-2 logit gap stays above
spec.support.prompts.MARGIN over the whole horizon; then float32 engines must agree exactly, and
their logits must be close to the oracle's along the way.
Files: implementations/v00_full_recompute/engine.py; spec/support/oracle.py and prompts.py.
Tradeoff left visible: generating N tokens runs the model over N growing sequences: quadratic
work (measured in the v02 spec).
"""
import pytest
import torch

from spec.support.models import TINY, tiny_checkpoint
from spec.support.prompts import HORIZON, screened
from spec.support.snapshots import GoldenTokens, render
from torchlet.contract import GENERATE, GenerationParams

pytestmark = pytest.mark.needs(GENERATE)


@pytest.fixture(scope="module")
def engines(impl):
    return {name: impl.build(tiny_checkpoint(name)) for name in TINY}


@pytest.fixture(scope="module")
def greedy(engines):
    """fixture -> the version's greedy tokens for its screened prompts, generated once: the oracle
    and the golden file judge the same run."""
    made = {}

    def tokens(fixture):
        if fixture not in made:
            prompts = [list(p) for p, _ in screened(fixture)]
            made[fixture] = engines[fixture].generate(prompts,
                                                      GenerationParams(max_new_tokens=HORIZON))
        return made[fixture]
    return tokens


@pytest.fixture
def golden(snapshot):
    return snapshot.use_extension(GoldenTokens)


@pytest.mark.parametrize("fixture", TINY)
def test_greedy_tokens_equal_the_oracle(greedy, fixture):
    for (prompt, ref), out in zip(screened(fixture), greedy(fixture)):
        assert out == ref.tokens, f"prompt {prompt}"


@pytest.mark.parametrize("fixture", TINY)
def test_logits_stay_close_to_the_oracle_along_the_reference_path(engines, fixture):
    for prompt, ref in screened(fixture)[:2]:
        sequence = list(prompt) + ref.tokens[:-1]
        ours = engines[fixture].logits(sequence)
        torch.testing.assert_close(ours, ref.logits, atol=1e-3, rtol=1e-3)


def test_max_new_tokens_is_exact(engines):
    prompt, ref = screened("tiny_llama")[0]
    for n in (1, 5):
        assert engines["tiny_llama"].generate([list(prompt)], GenerationParams(max_new_tokens=n)) \
            == [ref.tokens[:n]]


def test_generation_stops_at_a_stop_id_and_includes_it(engines):
    prompt, ref = screened("tiny_llama")[1]
    stop = ref.tokens[4]
    first = ref.tokens.index(stop)
    params = GenerationParams(max_new_tokens=HORIZON, stop_token_ids=(stop,))
    assert engines["tiny_llama"].generate([list(prompt)], params) == [ref.tokens[:first + 1]]


def test_eos_stops_unless_ignored(engines):
    prompt, ref = screened("tiny_qwen2")[1]
    eos = ref.tokens[6]
    first = ref.tokens.index(eos)
    stop = GenerationParams(max_new_tokens=HORIZON, eos_token_ids=(eos,))
    ignore = GenerationParams(max_new_tokens=HORIZON, eos_token_ids=(eos,), ignore_eos=True)
    assert engines["tiny_qwen2"].generate([list(prompt)], stop) == [ref.tokens[:first + 1]]
    assert engines["tiny_qwen2"].generate([list(prompt)], ignore) == [ref.tokens]


def test_stream_yields_the_generated_tokens_one_by_one(engines):
    prompt, ref = screened("tiny_qwen2")[0]
    stream = engines["tiny_qwen2"].stream(list(prompt), GenerationParams(max_new_tokens=6))
    assert next(stream) == ref.tokens[0]
    assert list(stream) == ref.tokens[1:6]


def test_a_batch_of_prompts_gives_each_prompt_its_solo_tokens(engines):
    cases = screened("tiny_llama")
    prompts = [list(p) for p, _ in cases] + [list(cases[0][0])]
    refs = [r.tokens[:10] for _, r in cases] + [cases[0][1].tokens[:10]]
    assert engines["tiny_llama"].generate(prompts, GenerationParams(max_new_tokens=10)) == refs


def golden_rows(fixture, tokens_for):
    prompts = [list(p) for p, _ in screened(fixture)]
    return render(zip(prompts, tokens_for(fixture, prompts)))


@pytest.mark.parametrize("fixture", TINY)
def test_oracle_tokens_match_the_golden_file(golden, fixture):
    """The oracle writes the golden file: `pytest -k oracle --snapshot-update`."""
    assert golden_rows(fixture, lambda f, ps: [r.tokens for _, r in screened(f)]) \
        == golden(name=fixture)


@pytest.mark.parametrize("fixture", TINY)
def test_greedy_tokens_match_the_golden_file(request, greedy, golden, fixture):
    if request.config.getoption("--snapshot-update"):
        pytest.skip("only the oracle writes the golden file")
    assert golden_rows(fixture, lambda f, ps: greedy(f)) == golden(name=fixture)
