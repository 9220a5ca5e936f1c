"""v02_kv_cache: prefill once, then feed one token per step.

What it introduces: a per-request K/V cache. Prefill runs the prompts as one ragged batch and
stores every layer's keys (after RoPE) and values; each decode step feeds each running request
only its newest token, which attends over the cache and appends its own K/V.
Why v01 needs it: v01 re-runs every request's whole sequence at every step, so the work to make
N tokens grows with N squared. The history's keys and values never change, so computing them
again is pure waste.
Core principle: decode reads history only from the cache, never from the token ids. Measured:
every decode pass feeds exactly one row per running request to every layer. (From v05 on, a
decode pass has fixed lanes, every one run, idle or not: there the rows per pass are the
same at every layer, at least the running requests and at most the lane count, and still do not
grow with the history. From v14, which launches a decode before it has read whether the step's
token stops its request, a request stopped by a stop token is fed that token too: one row at a
new position, computed for nothing, at most one per request and never a recompute.)
Metamorphic: garbage in the history ids changes nothing, a cache filled from another history
changes the output. And the cache holds exactly what Hugging Face computes for the same tokens.
Files: implementations/v02_kv_cache/{kv.py, model.py, runner.py, loop.py} against
implementations/v01_1_split_gqa/model.py and implementations/v01_0_ragged_batch/loop.py.
Tradeoff left visible: memory. The cache holds 2 * layers * kv_heads * head_dim numbers per token
per request, and grows by concatenation, copying a request's history at every step (v05-v08
preallocate and page it).
"""
from collections import Counter

import pytest
import torch
from hypothesis import example, given

import implementations
from spec.support.inputs import strategies as sts
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.watchers.meter import TokenMeter
from spec.support.models.fixtures import TINY, tiny_checkpoint
from spec.support.oracles.oracle import cached_model
from spec.support.oracles.decode_ahead import wasted
from torchlet.contract import DECODE_LANES, KV_CACHE, GenerationParams, RequestError

pytestmark = pytest.mark.spec(needs=KV_CACHE)

FIXTURE = "tiny_qwen2"
CKPT = tiny_checkpoint(FIXTURE)
VOCAB = CKPT.config.vocab_size
LAYERS = CKPT.config.num_layers
PROMPT = [17, 5, 300, 42, 99, 8, 250]


@pytest.fixture(scope="module")
def engine(impl):
    return impl.build(CKPT, dtype=torch.float64)


@pytest.fixture(scope="module")
def slots(impl, engine):
    """Lanes a decode pass may carry beyond the running requests: none before v05."""
    return engine.num_lanes if DECODE_LANES in impl.capabilities else None


def assert_decode_rows(rows: list[int], running: int, slots: int | None) -> None:
    assert len(set(rows)) == 1, f"layers fed different rows: {rows}"
    if slots is None:
        assert rows[0] == running
    else:
        assert running <= rows[0] <= slots


@given(batch=sts.prompt_batches(VOCAB), params=sts.params(max_new=6, vocab=VOCAB))
# v14 launches a decode ahead for this request, which then stops at its second token, 34
@example(batch=[[3, 3, 3, 173, 3]], params=GenerationParams(max_new_tokens=3,
                                                             stop_token_ids=(34,)))
@engine_settings()
def test_each_decode_pass_feeds_exactly_one_new_token_per_running_request(impl, engine, slots,
                                                                          batch, params):
    with TokenMeter(CKPT) as meter:
        outputs = engine.generate(batch, params)
    passes, fed = meter.passes(), meter.fed()
    assert passes[0] == [sum(map(len, batch))] * LAYERS  # the prefill: the prompts, once
    assert sorted(fed[0]) == sorted(t for p in batch for t in p)
    # Decode pass k feeds each request with a token still to make after its k-th: one row each,
    # its k-th token, every layer. From v14 a request stopped at a stop token was also fed its
    # last token once (wasted): a new position, computed for nothing; nothing is fed twice.
    ends = [len(out) + wasted(impl, out, params) for out in outputs]
    assert len(passes) == max(ends)
    for k, (rows, ids) in enumerate(zip(passes[1:], fed[1:]), start=1):
        newest = Counter(out[k - 1] for out, end in zip(outputs, ends) if end > k)
        assert_decode_rows(rows, newest.total(), slots)
        lanes = Counter(ids)  # from v05 idle lanes may feed ids of their own
        assert (newest <= lanes if slots else newest == lanes), f"pass {k} fed {ids}: {outputs}"


def rows_to_generate(engine, n: int) -> int:
    with TokenMeter(CKPT) as meter:
        engine.generate([PROMPT], GenerationParams(max_new_tokens=n))
    return meter.total(layer=0)


def test_work_for_n_tokens_grows_linearly_here_and_quadratically_in_v00(engine, slots):
    v00 = implementations.load("v00_full_recompute").build(CKPT)
    p, sizes = len(PROMPT), (4, 8, 16)
    cached = [rows_to_generate(engine, n) for n in sizes]
    recomputed = [rows_to_generate(v00, n) for n in sizes]
    # Here: the prompt once, then one row per new token but the last (it is never fed back);
    # from v05, one row per decode lane, a fixed number per pass.
    lanes = 1 if slots is None else (cached[1] - cached[0]) // (sizes[1] - sizes[0])
    assert 1 <= lanes <= (slots or 1)
    assert cached == [p + (n - 1) * lanes for n in sizes]
    # v00: step i re-runs the prompt and the i tokens made so far.
    assert recomputed == [n * p + n * (n - 1) // 2 for n in sizes]
    assert recomputed[-1] - recomputed[-2] > 2 * (recomputed[-2] - recomputed[-3])


def test_decode_ignores_the_history_token_ids_it_is_given(engine):
    """Metamorphic: after prefill, garbage in place of the history leaves decode unchanged."""
    real = PROMPT + [61]
    garbage = [VOCAB - 1 - t for t in PROMPT] + [61]
    engine.prefill(["real", "garbage"], [PROMPT, PROMPT])
    try:
        logits = engine.decode(["real", "garbage"], [real, garbage])
        torch.testing.assert_close(logits[1], logits[0])
        # Softmax runs in float32 (as in Hugging Face), and from v05 over a padded row of keys.
        torch.testing.assert_close(logits[0], engine.logits(real)[-1], atol=1e-5, rtol=1e-5)
    finally:
        engine.release("real"), engine.release("garbage")


def test_decode_reads_the_cache_so_a_cache_from_another_history_changes_the_output(engine):
    """Metamorphic: fill a request's cache from a different history of the same length, then
    decode it with the real ids: the output follows the cache, not the ids."""
    other = [VOCAB - 1 - t for t in PROMPT]
    real = PROMPT + [61]
    engine.prefill(["corrupt"], [other])
    try:
        logits = engine.decode(["corrupt"], [real])[0]
        assert not torch.allclose(logits, engine.logits(real)[-1], atol=1e-3)
        torch.testing.assert_close(logits, engine.logits(other + [61])[-1], atol=1e-5, rtol=1e-5)
    finally:
        engine.release("corrupt")


@pytest.mark.parametrize("fixture", TINY)
def test_the_cache_holds_the_keys_and_values_hf_computes_from_scratch(impl, fixture):
    ckpt = tiny_checkpoint(fixture)
    engine = impl.build(ckpt, dtype=torch.float64)
    seq = list(PROMPT)
    logits = engine.prefill([0], [seq])
    for _ in range(3):  # three decode steps append three rows
        seq.append(int(logits[0].argmax()))
        logits = engine.decode([0], [seq])
    ours = engine.cached_kv(0)
    assert engine.num_cached_tokens(0) == len(seq) == len(PROMPT) + 3
    with torch.inference_mode():
        out = cached_model(fixture)(torch.tensor([seq]), use_cache=True)
    hf = getattr(out, "cache", None) or out.past_key_values
    assert len(ours) == ckpt.config.num_layers
    # float64 everywhere but the softmax, which both sides run in float32 (as Hugging Face does);
    # from v05 over a padded row of keys, so decode rows may differ at float32 rounding.
    for (k, v), layer in zip(ours, hf.layers):
        torch.testing.assert_close(k, layer.keys[0].transpose(0, 1), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, layer.values[0].transpose(0, 1), atol=1e-5, rtol=1e-5)


def test_release_frees_the_cache_and_decode_refuses_a_request_without_one(engine):
    engine.prefill([7], [PROMPT])
    assert engine.num_cached_tokens(7) == len(PROMPT)
    engine.release(7)
    assert engine.num_cached_tokens(7) == 0
    with pytest.raises(RequestError):
        engine.decode([7], [PROMPT + [1]])


def test_the_cached_token_counts_are_the_rows_the_cache_holds(impl):
    """Read against cached_kv, the K/V rows themselves, through prefill, decode and release."""
    engine = impl.build(CKPT)
    prompts = {"a": PROMPT, "b": [9, 8, 7]}
    logits = engine.prefill(list(prompts), list(prompts.values()))
    seqs = {r: p + [int(logits[i].argmax())] for i, (r, p) in enumerate(prompts.items())}
    engine.decode(list(seqs), list(seqs.values()))

    def rows(r):
        return engine.cached_kv(r)[0][0].shape[0]

    assert [engine.num_cached_tokens(r) for r in seqs] == [rows(r) for r in seqs] == [8, 4]
    assert engine.total_cached_tokens() == 12
    engine.release("a")
    assert engine.total_cached_tokens() == rows("b") == 4
    engine.release("b")
    assert engine.total_cached_tokens() == 0


def test_decode_refuses_a_request_that_was_never_prefilled_even_for_its_first_token(engine):
    """A one-token sequence of an id with no cache asks to decode a token with nothing before
    it: refused with the contract's error, nothing cached, as a longer one is."""
    before = engine.total_cached_tokens()
    for sequence in ([1], PROMPT + [1]):
        with pytest.raises(RequestError, match="never"):  # the error names the request
            engine.decode(["never"], [sequence])
        assert engine.num_cached_tokens("never") == 0
        assert engine.total_cached_tokens() == before


def test_decode_refuses_a_sequence_whose_history_is_not_all_cached(engine):
    engine.prefill([8], [PROMPT])
    try:
        with pytest.raises(RequestError):
            engine.decode([8], [PROMPT + [1, 2]])
    finally:
        engine.release(8)


@pytest.fixture(scope="module")
def previous():
    return implementations.load("v01_1_split_gqa").build(CKPT, dtype=torch.float64)


@given(batch=sts.prompt_batches(VOCAB), params=sts.params(vocab=VOCAB))
@engine_settings()
def test_generate_gives_the_tokens_of_v01_1(engine, previous, batch, params):
    assert engine.generate(batch, params) == previous.generate(batch, params)
