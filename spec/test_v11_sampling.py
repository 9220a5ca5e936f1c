"""v11_sampling: temperature, top-k, top-p and min-p, with per-request seeds no batch can disturb.

What it introduces: GenerationParams' temperature (0 is greedy), top_k (0 is off), top_p (1 is
off), min_p (0 is off) and seed (None: the engine picks one when the request arrives). A sampler
part (implementations/v11_sampling/sampler.py: SeededSampler, each lane's settings, over the
functions of draw.py, exported as `draw`) applies the filters in Hugging Face's order,
temperature, top-k, top-p, min-p, and draws by an exponential race:
argmax p / E, E ~ Exp(1), with uniforms hashed from (seed, position of the drawn token, token id)
as torchlet.contract.GenerationParams spells out. vLLM applies min-p before top-k and top-p;
Hugging Face is the oracle here, so its order holds. The draw runs on the device, inside the
captured decode step: a lane's settings are decode buffers like its token and position.

Why v10 needs it: every earlier version can only take the argmax, and a serving engine that can
only argmax is not one.

Core principle: a seeded draw depends on nothing but the request. Its tokens equal the oracle's
(Hugging Face's float64 logits, its warpers, the contract's stream, spec/support/oracles/sampling_oracle.py)
alone, in any batch, at any position and slot, arriving mid-run, and after a preemption under a
tight pool, whose recompute draws the same numbers again. The filters equal Hugging Face's on
random logits, ties included; the draws follow the filtered distribution by a chi-square test
and never pick a filtered token. temperature=0, and top_k=1 at any temperature, are greedy.
Seeds use their whole range: seeds one bit apart, anywhere in their 63 bits, draw differently.
The uniforms are the contract's bit for bit, strictly inside (0, 1), at the rarest hash values
too (found by inverting the hash): made in float32, the all-ones hash rounded to u = 1, whose
E = 0 won the race for any token, filtered or not, once in ~340 draws over a real vocabulary.
A step whose running requests are all greedy runs the greedy path, the argmax alone, whatever
its lanes ran before: watched from the ops it dispatches, no sort and no hash.

Files to compare: implementations/v11_sampling/{sampler.py, draw.py} against
implementations/v03_request_states/sampler.py (Greedy, the sampler part it replaces) and
implementations/v07_cuda_graph/runner.py (captured_step, which runs the sampler's draw inside
the graph) with implementations/v06_static_buffers/inputs.py (DecodeBuffers, which hold the
lanes' settings too).

Tradeoff left visible: every step sorts each lane's logits twice (top-k, then top-p on Hugging
Face's ascending order) and hashes a uniform per vocabulary entry, greedy lanes included, so the
step has one shape whatever its lanes ask. On CPU these engine specs run in float64, where v09's
layers fall back to PyTorch, so they do not wait on the Triton interpreter; the kernels under
sampling run in the GPU specs.
"""
from __future__ import annotations

import numbers
from fractions import Fraction

import numpy
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import implementations
from spec.support.oracles import sampling_oracle as oracle
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.prompts import screened
from spec.support.watchers.allocations import OpLog
from spec.support.watchers.block_watch import StepLog
from spec.support.watchers.replay_watch import ModelWatch
from spec.support.checks.snapshots import GoldenSamples, render_samples
from torchlet.contract import (SAMPLING, FinishReason, GenerationParams, RequestError,
                               RequestState)

pytestmark = pytest.mark.spec(needs=SAMPLING)

FIXTURE = "tiny_llama"
VOCAB = tiny_checkpoint(FIXTURE).config.vocab_size
SETTINGS = {"temperature", "top_k", "top_p", "min_p", "seed"}
DTYPE = torch.float64  # v09's layers run PyTorch in float64: no interpreter on CPU


def params_of(settings: oracle.Settings, seed: int | None, n: int = oracle.HORIZON):
    return GenerationParams(max_new_tokens=n, temperature=settings.temperature,
                            top_k=settings.top_k, top_p=settings.top_p, min_p=settings.min_p,
                            seed=seed)


@pytest.fixture(scope="module")
def engine(impl):
    return impl.build(tiny_checkpoint(FIXTURE), dtype=DTYPE, max_lanes=4)


@pytest.fixture(scope="module")
def tight(impl):
    """Four lanes over a pool too small for four requests: preemptions happen."""
    return impl.build(tiny_checkpoint(FIXTURE), dtype=DTYPE, max_lanes=4, block_size=4,
                      num_blocks=14)


def cases():
    return oracle.golden_cases(FIXTURE)


# -- the sampler: filters and draws -------------------------------------------------------------

@st.composite
def filter_cases(draw, vocab: int):
    """Random logits (sometimes with ties: rounded, or all equal so top-p lands exactly on a
    cumulative boundary) and settings, some of them off."""
    kind = draw(st.sampled_from(["random", "rounded", "flat"]))
    seed = draw(st.integers(0, 2 ** 16))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab, generator=g, dtype=torch.float64) * draw(st.sampled_from([1, 3]))
    if kind == "rounded":
        logits = torch.round(logits * 2) / 2
    elif kind == "flat":
        logits = torch.zeros(vocab, dtype=torch.float64)
    settings = oracle.Settings(
        temperature=draw(st.sampled_from([1.0, 0.5, 2.0]) | st.floats(0.05, 3.0)),
        top_k=draw(st.sampled_from([0, 1]) | st.integers(0, vocab + 2)),
        top_p=draw(st.sampled_from([1.0, 0.25, 0.5, 0.75]) | st.floats(0.01, 1.0)),
        min_p=draw(st.sampled_from([0.0, 0.5]) | st.floats(0.0, 1.0)))
    return logits, settings


def settings_tensors(batch: list[oracle.Settings], dtype=torch.float64):
    return (torch.tensor([s.temperature for s in batch], dtype=dtype),
            torch.tensor([s.top_k for s in batch], dtype=torch.long),
            torch.tensor([s.top_p for s in batch], dtype=dtype),
            torch.tensor([s.min_p for s in batch], dtype=dtype))


@pytest.mark.spec(part="sampler", first_with="draw")
@given(st.integers(2, 48).flatmap(lambda v: st.lists(filter_cases(v), min_size=1, max_size=4)))
def test_the_filters_equal_hugging_faces_warpers_row_by_row(impl, batch):
    """Per row of a batch with mixed settings: the same tokens keep non-zero probability, with
    the same renormalised probabilities, as Hugging Face's warpers in its order (float64)."""
    logits = torch.stack([x for x, _ in batch])
    ours = impl.package.draw.filter_logits(logits, *settings_tensors([s for _, s in batch]))
    for row, (x, s) in zip(ours, batch):
        ref = oracle.hf_filter(x, s)
        assert torch.equal(torch.isfinite(row), torch.isfinite(ref)), (x, s)
        torch.testing.assert_close(row.softmax(-1), ref.softmax(-1), rtol=1e-12, atol=1e-12)


DISTRIBUTION_LOGITS = torch.tensor([1.0, 0.5, 0.2, -1.0, 2.0, 0.0, -3.0, 0.7])
FALSE_ALARM = 1e-6  # chance that a correct sampler fails one of these tests, per settings row


@pytest.mark.spec(part="sampler", first_with="draw")
@pytest.mark.parametrize("settings", [oracle.Settings(1.0), oracle.Settings(0.7, 5, 0.9, 0.0),
                                      oracle.Settings(1.5, 0, 0.8, 0.1)], ids=str)
def test_seeded_draws_follow_the_filtered_distribution_by_a_chi_square_test(impl, settings):
    """40,000 draws on fixed logits, positions 0..39,999 of one seed and then one position of
    40,000 seeds: Pearson's chi-square against the filtered distribution at a false-alarm rate
    of 1e-6 (the seeds are fixed, so the test is deterministic); filtered tokens are never
    drawn."""
    n = 40_000
    logits = DISTRIBUTION_LOGITS.repeat(n, 1)
    probs = oracle.hf_filter(DISTRIBUTION_LOGITS.double(), settings).softmax(-1)
    t, k, p, m = settings_tensors([settings] * n, torch.float32)
    sampler = impl.package.draw
    for seed, position in ((torch.full((n,), 1234), torch.arange(n)),
                           (torch.arange(n) * 7919, torch.full((n,), 17))):
        tokens = sampler.sample(logits, t, k, p, m, seed, position)
        counts = torch.bincount(tokens, minlength=len(probs)).double()
        assert counts[probs == 0].sum() == 0, "a filtered token was drawn"
        assert oracle.chi_square_p(counts, probs) > FALSE_ALARM, (counts, probs * n)


@pytest.mark.spec(part="sampler", first_with="draw")
def test_a_draw_depends_on_seed_and_position_only(impl):
    """The same (seed, position) draws the same token from the same logits in any row of any
    batch; another seed or position draws differently somewhere."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(1, 64, generator=g).repeat(6, 1)
    t, k, p, m = settings_tensors([oracle.Settings(1.0)] * 6, torch.float32)
    sampler = impl.package.draw
    seeds = torch.tensor([5, 9, 5, 5, 9, 6])
    positions = torch.tensor([3, 3, 3, 4, 3, 3])
    for order in (torch.arange(6), torch.tensor([5, 4, 3, 2, 1, 0])):
        tokens = sampler.sample(logits[order], t, k, p, m, seeds[order], positions[order])
        by = dict(zip(order.tolist(), tokens.tolist()))
        assert by[0] == by[2] and by[1] == by[4]
    many = sampler.sample(logits.repeat(20, 1), *(x.repeat(20) for x in (t, k, p, m)),
                          torch.arange(120), torch.zeros(120, dtype=torch.long))
    assert len(set(many.tolist())) > 10  # seeds 0..119 at one position spread over the vocab


REAL_VOCAB = 49_152  # SmolLM2's: a real vocabulary, where one hash in 2^24 is not rare
ALL_ONES = 2 ** 24 - 1
# the hash's top 24 bits where float32 rounds (x + 0.5): all ones, just past 2^23 (odd and even),
# and the smallest, next to u = 0
EXTREMES = (ALL_ONES, ALL_ONES - 1, 2 ** 23, 2 ** 23 + 1, 2 ** 23 + 3, 0)


@pytest.mark.spec(part="sampler", first_with="draw")
@pytest.mark.parametrize("top24", EXTREMES)
def test_uniforms_equal_the_oracles_bit_for_bit_at_the_extreme_hash_values(impl, top24):
    """For a (seed, position) whose stream holds the extreme value top24 at one token (found by
    inverting the hash), the version's uniforms over a real vocabulary equal the contract's,
    computed by the oracle in float64, exactly; every one lies strictly inside (0, 1)."""
    seed = oracle.seeds_with_bits(top24, REAL_VOCAB, 1)[0]
    token = oracle.token_with_bits(seed, 7, top24)
    ours = impl.package.draw.uniforms(torch.tensor([seed]), torch.tensor([7]), REAL_VOCAB)[0]
    expected = oracle.uniforms(seed, 7, REAL_VOCAB)
    assert expected[token] == (top24 + 0.5) / 2 ** 24
    assert torch.equal(ours.double(), expected), (seed, token, float(ours[token]))
    assert 0 < float(ours.min()) and float(ours.max()) < 1


def race_rows(seeds: list[int], position: int, vocab: int, settings: oracle.Settings):
    g = torch.Generator().manual_seed(position)
    logits = torch.randn(len(seeds), vocab, generator=g) * 3
    t, k, p, m = settings_tensors([settings] * len(seeds), torch.float32)
    return logits, (t, k, p, m, torch.tensor(seeds), torch.full((len(seeds),), position))


@pytest.mark.spec(part="sampler", first_with="draw")
def test_top_k_one_draws_the_greedy_token_for_every_seed_whose_stream_holds_an_all_ones_hash(
        impl):
    """Of seeds 0..29,999, every one whose stream at position 7 over a 49,152-token vocabulary
    holds the all-ones hash (about 90 of them; the others' uniforms are nowhere near 1), at
    temperature 0.8 and top_k=1: the draw is the argmax, whichever token the extreme landed on."""
    seeds = [s for s in oracle.seeds_with_bits(ALL_ONES, REAL_VOCAB, 200) if s < 30_000]
    logits, settings = race_rows(seeds, 7, REAL_VOCAB, oracle.Settings(0.8, 1, 1.0, 0.0))
    drawn = impl.package.draw.sample(logits, *settings)
    assert torch.equal(drawn, logits.argmax(-1)), [
        (s, int(d)) for s, d, a in zip(seeds, drawn, logits.argmax(-1)) if d != a]


@pytest.mark.spec(part="sampler", first_with="draw")
@engine_settings()  # one 49,152-token row sorted twice an example: a model step's cost
@given(position=st.integers(0, 2 ** 31), start=st.integers(0, 2 ** 62),
       top24=st.sampled_from([ALL_ONES, 2 ** 23 + 1, 0]), extreme=st.booleans(),
       settings=st.builds(oracle.Settings, st.floats(0.05, 3.0),
                          st.sampled_from([0, 1, 2]) | st.integers(0, 100),
                          st.sampled_from([1.0, 0.5]) | st.floats(0.01, 1.0),
                          st.sampled_from([0.0, 0.5]) | st.floats(0.0, 1.0)))
def test_a_sampled_token_is_always_inside_the_filtered_support(impl, position, start, top24,
                                                               extreme, settings):
    """Over seeds, positions and filters on a real vocabulary, a draw never leaves the tokens
    Hugging Face's warpers keep; half the examples take the first seed from `start` whose stream
    holds an extreme hash, so the rare uniforms next to 0 and 1 are always in the draw."""
    seed = oracle.seeds_with_bits(top24, REAL_VOCAB, 1, position, start)[0] if extreme else start
    logits, tensors = race_rows([seed], position, REAL_VOCAB, settings)
    token = int(impl.package.draw.sample(logits, *tensors)[0])
    support = torch.isfinite(oracle.hf_filter(logits[0].double(), settings))
    assert support[token], (seed, token, int(support.sum()))


# -- the engine ---------------------------------------------------------------------------------

def test_temperature_zero_and_top_k_one_are_greedy(impl, engine):
    """temperature=0 (whatever the other settings) and top_k=1 at any temperature give exactly
    the oracle's greedy tokens, which every earlier version gives."""
    picked = screened(FIXTURE)[:2]
    prompts = [list(p) for p, _ in picked]
    expected = [ref.tokens[:10] for _, ref in picked]
    for params in (GenerationParams(max_new_tokens=10),
                   GenerationParams(max_new_tokens=10, top_k=3, top_p=0.5, seed=1),
                   GenerationParams(max_new_tokens=10, temperature=1.7, top_k=1, seed=2),
                   GenerationParams(max_new_tokens=10, temperature=0.3, top_k=1)):
        assert engine.generate(prompts, params) == expected, params


def test_seeded_samples_equal_the_oracles_alone_and_in_one_batch(engine):
    for prompt, settings, seed, tokens in cases():
        assert engine.generate([list(prompt)], params_of(settings, seed)) == [list(tokens)]
    # generate() takes one params for all; the step API gives each request its own
    ids = [engine.add_request(list(p), params_of(s, seed)) for p, s, seed, _ in cases()]
    while engine.has_unfinished():
        engine.step()
    assert [engine.output(i).tokens for i in ids] == [list(t) for *_, t in cases()]


@st.composite
def schedules(draw):
    """Requests of the golden cases (repeats allowed), each with an arrival step, a length and
    a position in its arrival's order."""
    n = draw(st.integers(1, 6))
    return [(draw(st.integers(0, len(cases()) - 1)), draw(st.integers(0, 8)),
             draw(st.integers(1, oracle.HORIZON))) for _ in range(n)]


def run_schedule(engine, schedule):
    pending = sorted(enumerate(schedule), key=lambda e: e[1][1])
    ids, step = {}, 0
    while pending or engine.has_unfinished():
        while pending and pending[0][1][1] <= step:
            j, (case, _, n) = pending.pop(0)
            prompt, settings, seed, _ = cases()[case]
            ids[j] = engine.add_request(list(prompt), params_of(settings, seed, n))
        engine.step()
        step += 1
    return {j: engine.output(i).tokens for j, i in ids.items()}


@engine_settings()
@given(schedule=schedules())
def test_a_seeded_request_draws_the_oracles_tokens_under_any_schedule(tight, schedule):
    """Any mix, arrival order and arrival step of seeded requests, over four lanes and a pool
    that preempts: each request's tokens are the oracle's, cut at its length."""
    before = tight.num_preemptions
    out = run_schedule(tight, schedule)
    for j, (case, _, n) in enumerate(schedule):
        assert out[j] == list(cases()[case][3][:n]), (j, schedule, tight.num_preemptions - before)


def test_greedy_and_seeded_requests_decoded_together_each_get_the_oracles_tokens(engine):
    """A greedy request in the lowest lane and seeded ones after it: the step must sample for
    them (and take the argmax for the greedy lane) whichever lane comes first."""
    prompt, ref = screened(FIXTURE)[0]
    greedy = engine.add_request(list(prompt), GenerationParams(max_new_tokens=oracle.HORIZON))
    engine.step()
    seeded = [engine.add_request(list(p), params_of(s, seed)) for p, s, seed, _ in cases()[:2]]
    while engine.has_unfinished():
        engine.step()
    assert engine.output(greedy).tokens == ref.tokens[:oracle.HORIZON]
    assert [engine.output(i).tokens for i in seeded] == [list(c[3]) for c in cases()[:2]]


def test_preemption_happens_under_the_tight_pool_and_the_recompute_draws_the_same(tight):
    """The schedule the property above relies on really preempts, and the preempted request's
    tokens (recomputed from its whole sequence) are still the oracle's."""
    before = tight.num_preemptions
    out = run_schedule(tight, [(0, 0, 12), (1, 0, 12), (2, 0, 12), (3, 0, 12)])
    assert tight.num_preemptions > before
    assert [out[j] for j in range(4)] == [list(c[3]) for c in cases()]


def test_a_sampling_step_reads_the_lanes_settings_and_draws_inside_the_replayed_graph(
        impl, engine):
    """The step reads each lane's settings from sampling_buffers() (watched from outside: the
    value each tensor held when an op first read it), and a replayed step runs no model or
    sampler Python: the draw is inside the graph."""
    prompt, settings, seed, tokens = cases()[1]
    rid = engine.add_request(list(prompt), params_of(settings, seed))
    engine.step()  # prefill: the lane gets its settings
    engine.step()  # the first decode step of this bucket captures it
    lane = engine.lane_of(rid)
    with StepLog(engine.sampling_buffers(), VOCAB) as log, \
            ModelWatch(impl, also=(impl.package.draw,)) as watch:
        engine.step()
    assert set(log.read) == set(SETTINGS), f"the step read only {sorted(log.read)}"
    assert float(log.read["temperature"][lane]) == pytest.approx(settings.temperature)
    assert int(log.read["top_k"][lane]) == settings.top_k
    assert int(log.read["seed"][lane]) == seed
    assert watch.model_calls == [] and watch.model_ops == [], sorted(set(watch.model_calls))
    while engine.has_unfinished():
        engine.step()
    assert engine.output(rid).tokens == list(tokens)


def test_a_step_whose_lanes_are_all_greedy_reads_no_settings_and_runs_no_sampler(impl):
    """The greedy graphs: the argmax, neither the settings nor the sampler's code (graphs off
    here, so the step's Python is visible)."""
    engine = impl.build(tiny_checkpoint(FIXTURE), dtype=DTYPE, use_graphs=False)
    prompt, ref = screened(FIXTURE)[0]
    rid = engine.add_request(list(prompt), GenerationParams(max_new_tokens=4))
    engine.step()
    with StepLog(engine.sampling_buffers(), VOCAB) as log, \
            ModelWatch(impl, also=(impl.package.draw,)) as watch:
        engine.step()
    assert log.read == {} and not [c for c in watch.model_calls if "sample" in c or
                                   "filter" in c or "uniform" in c], watch.model_calls
    while engine.has_unfinished():
        engine.step()
    assert engine.output(rid).tokens == ref.tokens[:4]


def sampler_ops(log: OpLog) -> set[str]:
    """The ops only the sampler dispatches: its sorts (top-k, top-p) and its stream's integer
    hashing (xor)."""
    return {op.name for op in log.ops if "sort" in op.name or "xor" in op.name}


def test_once_a_sampling_request_has_left_its_lane_all_greedy_steps_sort_and_hash_nothing(impl):
    """A seeded request and a greedy one decode together; once the seeded one has finished,
    every step runs the greedy path: neither the sampler's sorts nor its hashing, whatever the
    lane it left had asked for (graphs off: the step's ops are dispatched as it runs them,
    through the sampling or the greedy graph runner). The greedy request keeps the oracle's
    tokens."""
    engine = impl.build(tiny_checkpoint(FIXTURE), dtype=DTYPE, max_lanes=2,
                        use_graphs=False)
    prompt, settings, seed, _ = cases()[1]
    seeded = engine.add_request(list(prompt), params_of(settings, seed, 2))
    plain, ref = screened(FIXTURE)[0]
    greedy = engine.add_request(list(plain), GenerationParams(max_new_tokens=6))
    sampling, after = set(), []
    while engine.has_unfinished():
        running = engine.output(seeded).state is not RequestState.FINISHED
        with OpLog() as log:
            engine.step()
        (sampling.update if running else after.append)(sampler_ops(log))
    assert {"aten.sort.default"} <= sampling and any("xor" in n for n in sampling), sampling
    assert after and not set().union(*after), f"greedy steps ran the sampler's {after}"
    assert engine.output(greedy).tokens == ref.tokens[:6]


SEED = 0x5A3C_96E1_0F87_D2B4  # 63 bits, ones and zeros in both halves


def test_seeds_that_differ_in_any_one_of_their_63_bits_draw_differently(impl):
    """GenerationParams' stream reads every bit of a seed below 2^63: the seeds one bit away
    from SEED, at each of its 63 bits, draw other tokens than SEED, and so do seeds that differ
    above bit 31 alone (s and s + 2^32 k). At a temperature of 1000 every token is about as
    likely, so the tokens drawn are the stream's. (The stream folds a seed into a 32-bit key:
    two seeds far apart may collide; one bit apart they cannot.) One lane a request, graphs off:
    two steps."""
    low = SEED & 0xFFFF_FFFF
    seeds = [SEED] + [SEED ^ (1 << b) for b in range(63)] + [low + (k << 32) for k in (0, 1, 2)]
    engine = impl.build(tiny_checkpoint(FIXTURE), dtype=DTYPE, max_lanes=len(seeds),
                        use_graphs=False)
    flat = oracle.Settings(temperature=1000.0)
    ids = [engine.add_request([17, 5], params_of(flat, s, 2)) for s in seeds]
    while engine.has_unfinished():
        engine.step()
    drawn = [tuple(engine.output(i).tokens) for i in ids]
    same = [hex(s) for s, t in zip(seeds[1:64], drawn[1:64]) if t == drawn[0]]
    assert not same, f"seeds one bit from {SEED:#x} draw its very tokens: {same}"
    assert len(set(drawn[64:])) == 3, f"s + 2^32 k for k = 0, 1, 2 draw {drawn[64:]}"


def test_different_seeds_draw_differently_and_unseeded_requests_still_sample(engine):
    prompt, settings, _, _ = cases()[3]
    seeded = [engine.generate([list(prompt)], params_of(settings, seed))[0] for seed in (1, 2, 3)]
    assert len({tuple(t) for t in seeded}) == 3
    unseeded = engine.generate([list(prompt)] * 4, params_of(settings, None))
    assert len({tuple(t) for t in unseeded}) > 1


BAD = [("temperature", -0.5), ("temperature", float("nan")), ("temperature", float("inf")),
       ("top_p", 0.0), ("top_p", 1.5), ("top_p", float("nan")), ("top_k", -1), ("top_k", 2.5),
       ("min_p", -0.1), ("min_p", 1.01), ("seed", 1.5), ("seed", "7"), ("seed", True),
       ("temperature", 1e-45), ("temperature", 1e39), ("top_k", 2 ** 63), ("top_k", VOCAB + 1)]


class Unwritable:
    """An int as check_request sees one (an Integral that compares), which no buffer can take:
    converting it raises. What a request's settings do when written into a step's buffers is
    injected through the contract with it, as a FailsAt stop check is (v03's isolation page)."""

    def __init__(self, value: int):
        self.value = value

    def __lt__(self, other):
        return self.value < other

    def __gt__(self, other):
        return self.value > other

    def __le__(self, other):
        return self.value <= other

    def __ge__(self, other):
        return self.value >= other

    def __int__(self):
        raise OverflowError("an unwritable int")

    __index__ = __int__


numbers.Integral.register(Unwritable)

# Each setting: valid values, values past its range, other number types, and an unwritable one.
ANY_SETTING = {
    "temperature": st.sampled_from([0.0, 1.0, 1e-45, 1e-5, -1.0, float("inf"), numpy.float32(0.7),
                                    Fraction(1, 3), 10 ** 400 // 10 ** 390, 1e308]),
    "top_k": st.sampled_from([0, 1, 5, VOCAB, VOCAB + 1, 2 ** 63, -1, numpy.int64(3),
                              Unwritable(2)]),
    "top_p": st.sampled_from([1.0, 0.5, 1e-45, 0.0, numpy.float64(0.9), Fraction(1, 2)]),
    "min_p": st.sampled_from([0.0, 0.2, 1.0, 1e-45, numpy.float16(0.1)]),
    "seed": st.one_of(st.none(), st.integers(-2 ** 70, 2 ** 70),
                      st.sampled_from([numpy.uint64(2 ** 64 - 1), numpy.int64(-5),
                                       Unwritable(7)])),
}


@pytest.fixture(scope="module")
def neighbour(engine):
    """A seeded request's tokens alone: what it must draw beside any other request."""
    params = GenerationParams(max_new_tokens=4, temperature=0.9, seed=99)
    return params, engine.generate([[5, 6, 7]], params)[0]


@engine_settings()
@given(settings=st.fixed_dictionaries(ANY_SETTING), together=st.booleans())
def test_random_settings_valid_or_not_never_fail_a_step_nor_change_another_requests_tokens(
        engine, neighbour, settings, together):
    """Beside a seeded request, another is added with settings drawn from valid values, values
    past their ranges, other number types and an int no buffer can take: it is refused when
    added (RequestError), or it runs and finishes (on an error, with FinishReason.ERROR); every
    step returns, the neighbour draws its solo tokens, and afterwards nothing is held."""
    params, expected = neighbour
    first = engine.add_request([5, 6, 7], params)
    if together:
        engine.step()
    try:
        other = engine.add_request([9, 4], GenerationParams(max_new_tokens=3, **settings))
    except RequestError:
        other = None
    while engine.has_unfinished():
        engine.step()
    assert engine.output(first).tokens == expected
    if other is not None:
        out = engine.output(other)
        assert out.state is RequestState.FINISHED
        if out.finish_reason is FinishReason.ERROR:  # failed binding: no token taken
            assert (out.error, out.tokens) == ("OverflowError: an unwritable int", [])
    assert engine.total_cached_tokens() == 0


@pytest.mark.parametrize("name,value", BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_a_bad_setting_is_refused_by_name_and_queues_nothing(engine, name, value):
    params = GenerationParams(**{"max_new_tokens": 4, "temperature": 1.0, name: value})
    with pytest.raises(RequestError, match=name):
        engine.add_request([5, 6, 7], params)
    with pytest.raises(RequestError, match=name):
        engine.generate([[5, 6], [7, 8]], params)
    assert not engine.has_unfinished()
    assert engine.total_cached_tokens() == 0


# -- the golden file ----------------------------------------------------------------------------

@pytest.fixture
def golden(snapshot):
    return snapshot.use_extension(GoldenSamples)


def test_oracle_samples_match_the_golden_file(golden):
    """The oracle writes the golden file: `pytest -k oracle_samples --snapshot-update`."""
    assert render_samples(cases()) == golden(name=FIXTURE)


def test_seeded_samples_match_the_golden_file(request, engine, golden):
    if request.config.getoption("--snapshot-update"):
        pytest.skip("only the oracle writes the golden file")
    made = [(p, s, seed, engine.generate([list(p)], params_of(s, seed))[0])
            for p, s, seed, _ in cases()]
    assert render_samples(made) == golden(name=FIXTURE)


@pytest.mark.gpu
def test_on_cuda_the_replayed_step_draws_the_oracles_seeded_tokens(impl):
    """On a GPU, in float32, the draws run inside the captured CUDA graph, on the compiled
    kernels: each seeded request still draws the oracle's tokens (the golden cases are screened
    to survive float32-sized error), alone and four at once."""
    engine = impl.build(tiny_checkpoint(FIXTURE), device="cuda", dtype=torch.float32,
                        max_lanes=4)
    for prompt, settings, seed, tokens in cases()[:1]:
        assert engine.generate([list(prompt)], params_of(settings, seed)) == [list(tokens)]
    ids = [engine.add_request(list(p), params_of(s, seed)) for p, s, seed, _ in cases()]
    while engine.has_unfinished():
        engine.step()
    assert [engine.output(i).tokens for i in ids] == [list(t) for *_, t in cases()]
    assert sum(b["replays"] for b in engine.graph_stats().values()) > 0
