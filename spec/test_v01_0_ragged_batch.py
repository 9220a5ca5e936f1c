"""v01_0_ragged_batch: many requests, one forward pass, no padding.

What it introduces: the prompts of a call run together as one ragged batch. Their tokens are laid
end to end in one buffer and described by `req_indptr`, int32 prefix sums of length B + 1 (the
convention of FlashInfer's `qo_indptr`): request i owns rows req_indptr[i]:req_indptr[i+1].
Why v00 needs it: v00 runs one request at a time, so B requests read every weight B times per
step. Padding to the longest prompt would fix that but spend compute on pad tokens.
Core principle: every block but attention works row by row, so it runs on the flat buffer as is;
attention keeps requests apart by attending within each request's rows only. Batching must change
nothing a request sees: its tokens equal its solo run.
Files: implementations/v01_0_ragged_batch/{ragged.py, model.py, loop.py} against
implementations/v00_full_recompute/{model.py, loop.py}.
Tradeoff left visible: still full recompute. Each step re-runs every unfinished request's whole
sequence (the meter below counts it); v02 removes that.
"""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import implementations
from spec.support.inputs import strategies as sts
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.watchers.meter import TokenMeter
from spec.support.models.fixtures import TINY, tiny_checkpoint
from torchlet.contract import KV_CACHE, RAGGED_BATCH, GenerationParams, RequestError, flatten

pytestmark = pytest.mark.spec(needs=RAGGED_BATCH)

FIXTURE = "tiny_qwen2"
VOCAB = tiny_checkpoint(FIXTURE).config.vocab_size


@pytest.fixture(scope="module")
def engine(impl):
    # float64 so that batching's different summation order can't flip a near-tie argmax.
    return impl.build(tiny_checkpoint(FIXTURE), dtype=torch.float64)


@pytest.fixture(scope="module")
def previous():
    return implementations.load("v00_full_recompute").build(
        tiny_checkpoint(FIXTURE), dtype=torch.float64)


@given(batch=sts.prompt_batches(VOCAB), params=sts.params(vocab=VOCAB))
@engine_settings()
def test_each_request_in_a_ragged_batch_gets_the_tokens_of_its_solo_run(engine, previous, batch,
                                                                       params):
    solo = [engine.generate([p], params)[0] for p in batch]
    assert engine.generate(batch, params) == solo
    assert solo == [previous.generate([p], params)[0] for p in batch]


@given(batch=sts.prompt_batches(VOCAB))
@engine_settings()
def test_each_request_rows_of_the_batched_logits_equal_its_solo_logits(impl, engine, batch):
    indptr = impl.layers.req_indptr([len(p) for p in batch])
    logits = engine.forward_ragged(flatten(batch), indptr)
    assert logits.shape == (sum(map(len, batch)), VOCAB)
    for i, p in enumerate(batch):
        torch.testing.assert_close(logits[int(indptr[i]):int(indptr[i + 1])], engine.logits(p))


@pytest.mark.spec(part="model")
@given(lengths=st.lists(st.integers(1, 50), min_size=1, max_size=16))
@engine_settings()
def test_req_indptr_starts_at_zero_never_decreases_and_ends_at_the_total(impl, lengths):
    indptr = impl.layers.req_indptr(lengths)
    assert indptr.dtype == torch.int32 and indptr.shape == (len(lengths) + 1,)
    assert int(indptr[0]) == 0
    assert bool((indptr[1:] >= indptr[:-1]).all())
    assert int(indptr[-1]) == sum(lengths)
    assert (indptr[1:] - indptr[:-1]).tolist() == lengths


@pytest.mark.parametrize("bad", [
    pytest.param([1, 3, 5], id="does-not-start-at-0"),
    pytest.param([0, 3, 2, 5], id="decreases"),
    pytest.param([0, 2, 4], id="ends-short-of-the-tokens"),
    pytest.param([0, 3, 7], id="ends-past-the-tokens"),
])
def test_forward_ragged_refuses_a_req_indptr_that_does_not_describe_the_batch(engine, bad):
    with pytest.raises(RequestError):
        engine.forward_ragged([5] * 5, torch.tensor(bad, dtype=torch.int32))


def test_forward_ragged_refuses_a_req_indptr_that_is_not_int32(engine):
    with pytest.raises(RequestError, match="int32"):
        engine.forward_ragged([5] * 5, torch.tensor([0, 2, 5], dtype=torch.int64))


@pytest.mark.parametrize("fixture", TINY)
def test_the_model_receives_exactly_the_sum_of_the_lengths_in_token_rows(impl, fixture):
    ckpt = tiny_checkpoint(fixture)
    engine = impl.build(ckpt)
    batch = [[5, 6, 7], [9] * 11, [4], [8, 3, 5, 7, 9]]
    with TokenMeter(ckpt) as meter:
        engine.forward_ragged(flatten(batch), impl.layers.req_indptr([len(p) for p in batch]))
    # One pass through every layer, no pad rows: 3 + 11 + 1 + 5 = 20 in each.
    assert meter.passes() == [[20] * ckpt.config.num_layers]


@pytest.mark.parametrize("fixture", TINY)
def test_generate_feeds_all_prompts_in_one_first_pass_without_padding(impl, fixture):
    ckpt = tiny_checkpoint(fixture)
    engine = impl.build(ckpt)
    batch = [[5, 6, 7], [9] * 11, [4]]
    with TokenMeter(ckpt) as meter:
        engine.generate(batch, GenerationParams(max_new_tokens=3))
    passes = meter.passes()
    assert passes[0] == [15] * ckpt.config.num_layers
    assert len(passes) == 3  # one pass per new token, for the whole batch at once


@pytest.mark.spec(until=KV_CACHE)  # a KV cache removes the recompute: spec/test_v02_kv_cache.py
def test_without_a_cache_each_step_recomputes_every_unfinished_sequence(impl):
    """The tradeoff, measured: step k feeds each request its prompt plus the k tokens it has made
    so far."""
    ckpt = tiny_checkpoint(FIXTURE)
    engine = impl.build(ckpt)
    batch = [[5, 6, 7], [9] * 11, [4]]
    with TokenMeter(ckpt) as meter:
        engine.generate(batch, GenerationParams(max_new_tokens=4))
    assert [p[0] for p in meter.passes()] == [15 + 3 * k for k in range(4)]
