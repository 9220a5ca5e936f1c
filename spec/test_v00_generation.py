"""v00_full_recompute, page 2 of 3: greedy generation, token for token with the oracle.

What it introduces: `generate(prompts, params)` and `stream(prompt, params)`: greedy decoding that
re-runs the whole sequence through the model for every new token.
Why: it is the slowest correct engine; every later version must produce exactly its tokens.
Core principle: golden tokens come from the oracle (Hugging Face, float64), never from the code
under test. Prompts are screened so that the oracle's top-1/top-2 logit gap stays above
spec.support.oracles.prompts.MARGIN over the whole horizon; then float32 engines must agree exactly, and
their logits must be close to the oracle's along the way. A version's tokens are its checkpoint's
whatever the shape: on tiny_head_dim, whose head_dim is not hidden / heads (Qwen3's is not), on
tiny_qwen3 (a Qwen3: each head's q and k RMS-normed before RoPE), on tiny_gqa5 (5 query heads a KV
head), and on each fixture's twin, its shape with other weights, built after it in the same
process.
Files: implementations/v00_full_recompute/loop.py; spec/support/oracles/oracle.py and prompts.py.
Tradeoff left visible: generating N tokens runs the model over N growing sequences: quadratic
work (measured in the v02 spec).
"""
import pytest
import torch

from spec.support.models.fixtures import GQA5, HEAD_DIM, QWEN3, SHAPE_PROMPTS, TINY, TWINS, tiny_checkpoint
from spec.support.oracles.prompts import HORIZON, screened
from spec.support.checks.snapshots import GoldenTokens, render
from torchlet.contract import GENERATE, GenerationParams

pytestmark = pytest.mark.spec(needs=GENERATE)


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


SHORT = GenerationParams(max_new_tokens=6)


def test_a_checkpoint_whose_head_dim_is_not_hidden_over_heads_gives_the_oracles_tokens(impl):
    """tiny_head_dim declares 4 heads of 32 on a hidden size of 64, as Qwen3 declares its
    head_dim (16 heads of 128 on 1024): q is twice as wide as the rows it is made from. A
    version that sizes a head, or splits q, k and v, from the hidden size cannot give these."""
    assert_oracle_tokens(impl, HEAD_DIM, screened(HEAD_DIM)[:2])


def test_a_qwen3_checkpoint_gives_the_oracles_tokens(impl):
    """tiny_qwen3 is a Qwen3 (Hugging Face's Qwen3ForCausalLM is its oracle): each head's q and
    k RMS-normed by q_norm / k_norm (randomized weights) before RoPE, 4 heads of 32 on a hidden
    size of 64, no bias. A version that skips either norm, norms after RoPE or across heads,
    cannot give these."""
    assert_oracle_tokens(impl, QWEN3, screened(QWEN3, SHAPE_PROMPTS))


def test_five_query_heads_on_one_kv_head_give_the_oracles_tokens(impl):
    """tiny_gqa5's group of query heads is 5, not a power of two: a kernel's block of a group's
    heads is padded, and its padding heads must read and write nothing."""
    assert_oracle_tokens(impl, GQA5, screened(GQA5, SHAPE_PROMPTS))


def assert_oracle_tokens(impl, fixture, cases, **build):
    out = impl.build(tiny_checkpoint(fixture), **build).generate([list(p) for p, _ in cases],
                                                                 SHORT)
    assert out == [ref.tokens[:SHORT.max_new_tokens] for _, ref in cases]


@pytest.mark.gpu
@pytest.mark.parametrize("fixture", [HEAD_DIM, QWEN3, GQA5])
def test_on_cuda_the_shape_fixtures_give_the_oracles_tokens_in_float32(impl, fixture):
    """The three specs above on a GPU, each version as it serves there: its Triton kernels
    compiled (v09's norms and RoPE, v10's paged attention, v13's rope_split with Qwen3's norms
    and its context attention), its decode step a CUDA graph."""
    cases = screened(HEAD_DIM)[:2] if fixture == HEAD_DIM else screened(fixture, SHAPE_PROMPTS)
    assert_oracle_tokens(impl, fixture, cases, device="cuda")


@pytest.mark.parametrize("twin", TWINS)
def test_two_checkpoints_of_one_shape_built_in_one_process_each_give_their_own_tokens(
        impl, engines, twin):
    """A fixture's twin (its very config, other weights) built after it in the same process:
    the twin's engine gives the twin's oracle tokens and the fixture's engine still gives the
    fixture's. Anything kept per shape rather than per checkpoint (packed weights, a captured
    step) would serve one's weights to the other; spec/test_fixtures.py checks that the two
    checkpoints give other tokens on the twin's prompt."""
    n = SHORT.max_new_tokens
    prompt, ref = screened(twin)[1]
    assert impl.build(tiny_checkpoint(twin)).generate([list(prompt)], SHORT) == [ref.tokens[:n]]
    prompt, ref = screened(TWINS[twin])[1]
    assert engines[TWINS[twin]].generate([list(prompt)], SHORT) == [ref.tokens[:n]]


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
