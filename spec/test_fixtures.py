"""The tiny fixtures themselves: guards that keep parity from passing trivially.

A tiny random model with Hugging Face's default init repeats one token forever; any engine that
emits that token passes parity against it. These specs check that the oracle's greedy output on
the screened prompts is varied, and that the committed files are what the committed script makes.
"""
import pytest
import torch

from fixtures.make_fixtures import FIXTURES, SCALES, random_tensors
from spec.support.models import TINY, tiny_checkpoint
from spec.support.prompts import HORIZON, screened


@pytest.mark.parametrize("fixture", TINY)
def test_oracle_output_on_the_parity_prompts_is_varied(fixture):
    for prompt, ref in screened(fixture):
        assert len(ref.tokens) == HORIZON
        assert len(set(ref.tokens)) >= HORIZON // 3, (prompt, ref.tokens)


@pytest.mark.parametrize("fixture", TINY)
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
