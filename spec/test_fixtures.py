"""The tiny fixtures themselves: guards that keep parity from passing trivially.

A tiny random model with Hugging Face's default init repeats one token forever; any engine that
emits that token passes parity against it. These specs check that the oracle's greedy output on
the screened prompts is varied, and that the committed files are what the committed script makes.
"""
import pytest
import torch

from fixtures.make_fixtures import FIXTURES, SCALES, random_tensors
from spec.support.models.fixtures import GQA5, HEAD_DIM, QWEN3, SHAPE_PROMPTS, TINY, TWINS, tiny_checkpoint
from spec.support.oracles.oracle import cached_model, greedy
from spec.support.oracles.prompts import HORIZON, screened


@pytest.mark.parametrize("fixture", [*TINY, HEAD_DIM, *TWINS])
def test_oracle_output_on_the_parity_prompts_is_varied(fixture):
    for prompt, ref in screened(fixture):
        assert len(ref.tokens) == HORIZON
        assert len(set(ref.tokens)) >= HORIZON // 3, (prompt, ref.tokens)


@pytest.mark.parametrize("fixture", [QWEN3, GQA5])
def test_the_shape_fixtures_oracle_output_on_their_parity_prompts_is_varied(fixture):
    for prompt, ref in screened(fixture, SHAPE_PROMPTS):
        assert len(set(ref.tokens)) >= HORIZON // 3, (prompt, ref.tokens)


@pytest.mark.parametrize("fixture", [*TINY, HEAD_DIM, QWEN3, GQA5])
def test_committed_fixture_is_what_the_script_makes(fixture):
    ckpt = tiny_checkpoint(fixture)
    assert ckpt.config == FIXTURES[fixture]
    seed = 1234 + list(FIXTURES).index(fixture)
    expected = random_tensors(FIXTURES[fixture], seed, **SCALES[fixture])
    assert expected.keys() == ckpt.tensors.keys()
    for name, t in expected.items():
        assert torch.equal(ckpt.tensors[name], t), name


def test_fixtures_differ_in_bias_tying_and_head_ratio():
    a, b = (tiny_checkpoint(n).config for n in TINY)
    assert a.qkv_bias != b.qkv_bias and a.tie_embeddings != b.tie_embeddings
    assert a.group_size != b.group_size


def test_the_head_dim_fixture_declares_a_head_size_apart_from_the_hidden_size():
    c = tiny_checkpoint(HEAD_DIM).config
    assert c.num_heads * c.head_dim != c.hidden_size


def test_the_qwen3_fixture_norms_q_and_k_per_head_and_the_gqa5_fixture_groups_five_heads():
    qwen3, gqa5 = tiny_checkpoint(QWEN3), tiny_checkpoint(GQA5).config
    c = qwen3.config
    assert c.family == "qwen3" and c.qk_norm and not c.qkv_bias
    assert c.num_heads * c.head_dim != c.hidden_size
    assert qwen3.layer(0, "self_attn.k_norm.weight").shape == (c.head_dim,)
    assert gqa5.group_size == 5 and gqa5.num_heads == 5 * gqa5.num_kv_heads


@pytest.mark.parametrize("twin", TWINS)
def test_a_twin_has_its_fixtures_config_and_other_tokens(twin):
    """Same shape, other weights: on the prompt the twin's parity spec uses, the fixture's
    oracle gives other tokens than the twin's, so an engine that ran one's weights for the
    other would fail it."""
    mine, theirs = tiny_checkpoint(twin), tiny_checkpoint(TWINS[twin])
    assert mine.config == theirs.config and mine.tensors.keys() == theirs.tensors.keys()
    assert not any(torch.equal(t, theirs.tensors[n]) for n, t in mine.tensors.items())
    prompt, ref = screened(twin)[1]
    assert greedy(cached_model(TWINS[twin]), list(prompt), 6).tokens != ref.tokens[:6]
