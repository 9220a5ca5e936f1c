"""v17_speculative_decoding: guess k tokens cheaply, verify them in one pass, keep exactly the
tokens the engine would have drawn.

What it introduces: build(ckpt, speculative_tokens=k, proposer="ngram" | a draft Checkpoint | an
object with propose(requests, k), acceptance="exact" | "rejection"). A step in which at most
`speculate_below` requests decode, none waits, no prompt is being computed and the policy is
not resting (the min_tokens_per_pass option: 1.3 on a CPU, 2 elsewhere) asks the proposer
for up to k guesses after each one's last token, computes the last token and the guesses as rows of one pass through the paged cache, and
gives each request the guesses the engine's own draws agree with, plus one draw of its own. The
K/V rows of rejected guesses are rolled back. speculation_stats() counts passes and tokens.

Why v16 needs it: at batch 1 a decode step reads every weight for one token. A verifying pass
reads them once for up to k + 1.

Core principle: guesses change how many passes a request takes, never its tokens. With
acceptance="exact" greedy and seeded tokens are the oracle's (Hugging Face in float64) for k = 1,
2, 4 and 8, whether the guesses are right (a scripted proposer that reads the oracle's tokens),
wrong (the same, shifted by one) or the n-gram proposer's, alone and in a batch, in a tight
poisoned pool that preempts, with prompts cut into slices of a small budget. Right guesses give
k + 1 tokens a pass: the steps a request takes are counted. The roll-back is watched from outside:
after every step the spec itself fills with NaN every K/V row the step stored that no request
kept (RejectedRows), and the tokens stay the oracle's, so no later pass read one; a request whose
prompt repeats a rejected guess run finds no cached block that held it. acceptance="rejection"
keeps the target's distribution: the first kept token of 40,000 seeded accepts follows p by a
chi-square test, where a sampler that redraws from p without removing the guess fails it.

Files to compare: implementations/v17_speculative_decoding/runner.py (SpeculativeRunner.verify)
against implementations/v15_chunked_prefill/runner.py (prefill_slices); kv.py (RollbackPool,
SpeculativeKV) against implementations/v12_prefix_cache/kv.py; sampler.py against
implementations/v11_sampling/sampler.py; proposer.py is new.

Tradeoff left visible: a step that guesses runs in order (the next step's inputs are the tokens
it kept, known on the host only after it), so the overlap of v14 is given up where speculation
runs, and the policy turns speculation off above `speculate_below` decoding requests; guess rows
are not charged to the token budget; a rejected guess's row was computed for nothing.
"""
from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test
from torch.utils._python_dispatch import TorchDispatchMode

from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles import sampling_oracle as oracle
from spec.support.oracles.oracle import cached_model, greedy
from spec.support.oracles.oracle_cache import on_disk
from spec.support.oracles.prompts import MARGIN, screened
from spec.test_v12_block_pool import VOCAB as POOL_VOCAB, PrefixPoolMachine
from torchlet.contract import SPECULATIVE, BuildError, GenerationParams

pytestmark = pytest.mark.spec(needs=SPECULATIVE)

FIXTURE = "tiny_llama"
CKPT = tiny_checkpoint(FIXTURE)
VOCAB = CKPT.config.vocab_size
F64 = torch.float64
BLOCK = 4
NEW = 12
KS = (1, 2, 4, 8)


def build(impl, k: int, **options):
    options.setdefault("block_size", BLOCK)
    options.setdefault("min_tokens_per_pass", 0.0)  # these specs watch passes; a rest would hide them
    return impl.build(CKPT, dtype=F64, speculative_tokens=k, **options)


@functools.lru_cache(maxsize=None)
@on_disk
def repetitive_cases(count: int = 2) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """(prompt, NEW oracle tokens) for prompts that repeat a short run of tokens, where prompt
    lookup has something to find, kept where the float64 reference keeps a gap of MARGIN."""
    g, model, found = torch.Generator().manual_seed(17), cached_model(FIXTURE), []
    for _ in range(60):
        run = torch.randint(3, VOCAB, (int(torch.randint(2, 6, (1,), generator=g)),),
                            generator=g).tolist()
        prompt = tuple((run * 8)[:int(torch.randint(8, 24, (1,), generator=g))])
        ref = greedy(model, list(prompt), NEW, stop_below=MARGIN)
        if len(ref.tokens) == NEW and ref.horizon(MARGIN) == NEW:
            found.append((prompt, tuple(ref.tokens)))
            if len(found) == count:
                return tuple(found)
    raise AssertionError(f"only {len(found)} repetitive prompts keep a gap of {MARGIN}")


def greedy_cases():
    """Screened random prompts and repetitive ones, each with its NEW oracle tokens."""
    return [(p, tuple(ref.tokens[:NEW])) for p, ref in screened(FIXTURE)[:2]] + \
        list(repetitive_cases())


class Scripted:
    """A proposer that guesses from the oracle's tokens: right, or each guess shifted by one
    (wrong), or right for the first guess only (mixed), or nothing (none); nothing for a prompt
    it was not given.
    Logs every proposal it makes."""

    def __init__(self, cases, how: str = "right"):
        self.answers = {tuple(p): list(t) for p, t in cases}
        self.how, self.log = how, []

    def propose(self, requests, k):
        out = []
        for r in requests:
            made = len(r.sequence) - len(r.prompt)
            right = self.answers.get(tuple(r.prompt), [])[made:made + k]
            if self.how == "none":
                right = []
            elif self.how == "wrong":
                right = [(t + 1) % VOCAB for t in right]
            elif self.how == "mixed":
                right = right[:1] + [(t + 1) % VOCAB for t in right[1:]]
            out.append(right)
            self.log.append((list(r.sequence), right))
        return out


def run_steps(engine, prompts, params, after=lambda: None):
    """Requests added at once, stepped to the end: their tokens, and the steps taken."""
    ids = [engine.add_request(list(p), params) for p in prompts]
    steps = 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
        after()
    return [engine.output(i).tokens for i in ids], steps


class RejectedRows(TorchDispatchMode):
    """Every K/V store (an index_put_ of rows into a flat cache view) of a step; after the step,
    poison() fills with NaN each stored row that no running request keeps (its kept rows: its
    positions before its last token, through the block table it reports). The engine steps in
    order (overlap=False): a decode launched ahead stores a row its token is not yet kept for."""

    def __init__(self, engine):
        super().__init__()
        self.engine, self.caches, self.stored = engine, {}, set()
        self.poisoned = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.index_put_.default and args[0].is_floating_point():
            (index,) = args[1]
            self.caches[args[0].untyped_storage().data_ptr()] = args[0]
            self.stored.update(s for s in index.tolist() if s >= BLOCK)  # not the null block
        return out

    def poison(self, ids) -> None:
        kept = set()
        tables = self.engine.block_tables()
        for i in ids:
            out = self.engine.output(i)
            if i in tables:
                n = len(out.prompt) + len(out.tokens) - 1
                kept.update(tables[i][p // BLOCK] * BLOCK + p % BLOCK for p in range(n))
        rejected = sorted(self.stored - kept)
        for cache in self.caches.values():
            cache[rejected] = float("nan")
        self.poisoned += len(rejected)
        self.stored = set()


def watched_run(engine, prompts, params):
    """run_steps with RejectedRows over every step."""
    ids = []
    watch = RejectedRows(engine)
    for p in prompts:
        ids.append(engine.add_request(list(p), params))
    while engine.has_unfinished():
        with watch:
            engine.step()
        watch.poison(ids)
    return [engine.output(i).tokens for i in ids], watch


# --- exactness ---------------------------------------------------------------------------------


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("how", ["right", "wrong", "mixed", "ngram"])
def test_exact_greedy_tokens_are_the_oracles_alone_and_in_a_batch(impl, k, how):
    cases = greedy_cases()
    proposer = "ngram" if how == "ngram" else Scripted(cases, how)
    params = GenerationParams(max_new_tokens=NEW)
    engine = build(impl, k, proposer=proposer)
    for prompt, expected in cases[:1]:
        assert engine.generate([list(prompt)], params) == [list(expected)]
    tokens, _ = run_steps(engine, [p for p, _ in cases], params)
    assert tokens == [list(t) for _, t in cases]


def seeded_cases():
    return oracle.golden_cases(FIXTURE)


def params_of(settings, seed, n=oracle.HORIZON):
    return GenerationParams(max_new_tokens=n, temperature=settings.temperature,
                            top_k=settings.top_k, top_p=settings.top_p, min_p=settings.min_p,
                            seed=seed)


@pytest.mark.parametrize("k", (2, 4))
@pytest.mark.parametrize("how", ["right", "wrong", "ngram"])
def test_exact_seeded_samples_are_the_oracles_together_with_greedy_requests(impl, k, how):
    cases, plain = seeded_cases(), greedy_cases()
    scripted = [(p, t) for p, _, _, t in cases] + plain
    engine = build(impl, k, proposer="ngram" if how == "ngram" else Scripted(scripted, how))
    ids = [engine.add_request(list(p), params_of(s, seed)) for p, s, seed, _ in cases]
    greedy_ids = [engine.add_request(list(p), GenerationParams(max_new_tokens=NEW))
                  for p, _ in plain]
    while engine.has_unfinished():
        engine.step()
    assert [engine.output(i).tokens for i in ids] == [list(t) for *_, t in cases]
    assert [engine.output(i).tokens for i in greedy_ids] == [list(t) for _, t in plain]


@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_with_graphs_a_verifying_pass_replays_its_rows_and_their_draws(impl, graphs):
    """Graphs on, sampled and greedy requests together, every guess wrong (each pass verifies
    k + 1 rows a request): once each bucket of rows has been met (a first run of the same
    requests), every verifying step runs none of the model's code nor the draw's (the model
    watch sees no function of theirs called: the pass, its LM head and its draws replay a
    graph), speculation_stats counts each pass a graph pass, and the tokens are the oracle's.
    Graphs off, the rows are a slice pass and the model's code runs at every verifying step."""
    from spec.support.watchers.replay_watch import ModelWatch
    cases, plain = seeded_cases(), greedy_cases()
    scripted = Scripted([(p, t) for p, _, _, t in cases] + plain, "wrong")
    engine = build(impl, 2, proposer=scripted, use_graphs=graphs)

    def run(watched):
        ids = [engine.add_request(list(p), params_of(s, seed)) for p, s, seed, _ in cases]
        ids += [engine.add_request(list(p), GenerationParams(max_new_tokens=NEW))
                for p, _ in plain]
        calls = []
        while engine.has_unfinished():
            before = engine.speculation_stats()["verify_passes"]
            with ModelWatch(impl, also=(impl.package.draw,)) as watch:
                engine.step()
            if watched and engine.speculation_stats()["verify_passes"] > before:
                calls.append(watch.model_calls)
        assert [engine.output(i).tokens for i in ids] == (
            [list(t) for *_, t in cases] + [list(t) for _, t in plain])
        return calls

    run(False)
    calls = run(True)
    stats = engine.speculation_stats()
    assert len(calls) >= 3
    if graphs:
        assert all(c == [] for c in calls), calls
        assert stats["graph_passes"] == stats["verify_passes"]
    else:
        assert all(c for c in calls) and stats["graph_passes"] == 0


@pytest.mark.parametrize("k", (1, 3, 4))
def test_right_guesses_give_k_plus_one_tokens_a_pass(impl, k):
    """One request whose every guess is right: after its prefill step, each step gives it k + 1
    tokens (its last step what is left), counted in steps; the meter says every guess was kept."""
    cases = greedy_cases()[:1]
    engine = build(impl, k, proposer=Scripted(cases))
    tokens, steps = run_steps(engine, [cases[0][0]], GenerationParams(max_new_tokens=NEW))
    assert tokens == [list(cases[0][1])]
    assert steps == 1 + -(-(NEW - 1) // (k + 1))
    stats = engine.speculation_stats()  # a last step with no room for a guess is a plain one
    assert stats["accepted"] == stats["proposed"] and stats["verify_passes"] >= steps - 2


def test_a_draft_identical_to_the_target_has_every_guess_accepted(impl):
    cases = greedy_cases()[:2]
    engine = build(impl, 4, proposer=CKPT)
    tokens, steps = run_steps(engine, [p for p, _ in cases], GenerationParams(max_new_tokens=NEW))
    assert tokens == [list(t) for _, t in cases]
    assert steps == 1 + -(-(NEW - 1) // 5)
    stats = engine.speculation_stats()
    assert stats["accepted"] == stats["proposed"] > 0


# --- roll-back ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["wrong", "mixed", "ngram"])
def test_no_rejected_row_is_read_after_its_pass(impl, how):
    """The spec poisons every row a step stored and no request kept; the tokens stay the
    oracle's, so no later pass read one (and rows were rejected: some were poisoned)."""
    cases = greedy_cases()
    proposer = "ngram" if how == "ngram" else Scripted(cases, how)
    engine = build(impl, 4, proposer=proposer, prefix_cache=False, overlap=False)
    tokens, watch = watched_run(engine, [p for p, _ in cases], GenerationParams(max_new_tokens=NEW))
    assert tokens == [list(t) for _, t in cases]
    assert watch.poisoned > 0


def test_blocks_past_the_kept_rows_go_back_to_the_pool_after_every_step(impl):
    """After each step the pool's used blocks are exactly those the running requests' kept rows
    fill, and each one's block table is that long; and some step stored rows in blocks that no
    request holds after it: guesses took blocks for their pass only."""
    cases = greedy_cases()
    engine = build(impl, 8, proposer=Scripted(cases, "wrong"), prefix_cache=False, overlap=False)
    ids = [engine.add_request(list(p), GenerationParams(max_new_tokens=NEW)) for p, _ in cases]
    watch, returned = RejectedRows(engine), 0
    while engine.has_unfinished():
        with watch:
            engine.step()
        tables, used = engine.block_tables(), 0
        for i in ids:
            out = engine.output(i)
            if i in tables:
                held = -(-(len(out.prompt) + len(out.tokens) - 1) // BLOCK)
                assert len(tables[i]) == held, (i, tables[i])
                used += held
        assert engine.pool_stats()["num_used"] == used
        holding = {b for t in tables.values() for b in t}
        returned += len({s // BLOCK for s in watch.stored} - holding)
        watch.stored = set()
    assert returned > 0
    assert [engine.output(i).tokens for i in ids] == [list(t) for _, t in cases]


def test_a_tight_poisoned_pool_preempts_mid_run_and_keeps_the_oracles_tokens(impl):
    cases = greedy_cases()
    engine = build(impl, 4, proposer=Scripted(cases, "mixed"), num_blocks=12,
                   poison_free_blocks=True, max_lanes=4, overlap=False)
    tokens, watch = watched_run(engine, [p for p, _ in cases], GenerationParams(max_new_tokens=NEW))
    assert tokens == [list(t) for _, t in cases]
    assert engine.num_preemptions > 0


@pytest.mark.parametrize("budget", (4, 16))
def test_prompts_in_slices_beside_verifying_decodes_keep_the_oracles_tokens(impl, budget):
    cases = greedy_cases()
    engine = build(impl, 4, proposer="ngram", max_step_tokens=budget, max_lanes=4,
                   overlap=False)
    schedule = [(0, cases[0][0])] + [(2 * i, p) for i, (p, _) in enumerate(cases[1:], 1)]
    ids, step, pending = {}, 0, list(schedule)
    watch = RejectedRows(engine)
    while pending or engine.has_unfinished():
        while pending and pending[0][0] <= step:
            _, prompt = pending.pop(0)
            ids[prompt] = engine.add_request(list(prompt), GenerationParams(max_new_tokens=NEW))
        with watch:
            engine.step()
        watch.poison(list(ids.values()))
        step += 1
    assert [engine.output(ids[p]).tokens for p, _ in cases] == [list(t) for _, t in cases]


def test_a_prompt_that_repeats_a_rejected_guess_run_finds_no_block_that_held_it(impl):
    """A runs with wrong guesses of a whole block. Right after a step whose pass filled the block
    of A's last kept token with guesses, B arrives: its prompt is that sequence followed by those
    guesses. Were the block sealed under them, B would share it, and A's next pass (in B's first
    step, before B's slice reads it) writes A's own tokens over those rows: B's tokens are the
    oracle's, and so are A's."""
    case = greedy_cases()[0]
    scripted = Scripted([case], "wrong")
    engine = build(impl, BLOCK, proposer=scripted)
    a = engine.add_request(list(case[0]), GenerationParams(max_new_tokens=NEW))
    while not scripted.log or not (len(scripted.log[-1][0]) % BLOCK == 1
                                   and len(scripted.log[-1][1]) == BLOCK):
        engine.step()
    sequence, guesses = scripted.log[-1]
    prompt = sequence + guesses
    b = engine.add_request(prompt, GenerationParams(max_new_tokens=4))
    while engine.has_unfinished():
        engine.step()
    assert engine.output(b).tokens == greedy(cached_model(FIXTURE), prompt, 4).tokens
    assert engine.output(a).tokens == list(case[1])


# --- acceptance="rejection" --------------------------------------------------------------------

DISTRIBUTION_LOGITS = torch.tensor([1.0, 0.5, 0.2, -1.0, 2.0, 0.0, -3.0, 0.7])
FALSE_ALARM = 1e-6


class Row:
    """What the sampler reads of a request: its lane, sequence and settings."""

    def __init__(self, lane, params):
        self.lane, self.params, self.sequence = lane, params, [1, 2, 3]


@pytest.mark.spec(part="sampler")
@pytest.mark.parametrize("guess", (4, 6))
def test_rejection_acceptance_keeps_the_targets_distribution(impl, guess):
    """40,000 requests, one seed each, guess one token from fixed logits at temperature 1: the
    first token each keeps follows softmax(logits) by Pearson's chi-square at a false-alarm rate
    of 1e-6 (fixed seeds: deterministic). The negative control, the same accept test with the
    redraw from p itself (the guess not removed), fails the same test."""
    n = 40_000
    sampler = impl.package.SpeculativeSampler(n, "cpu", "rejection")
    requests = [Row(i, GenerationParams(temperature=1.0, seed=7919 * i)) for i in range(n)]
    sampler.bind(requests)
    logits = DISTRIBUTION_LOGITS.repeat(2 * n, 1)
    kept = sampler.accept(logits, requests, [[guess]] * n)
    first = torch.tensor([t[0] for t in kept])
    probs = DISTRIBUTION_LOGITS.double().softmax(-1)
    assert oracle.chi_square_p(torch.bincount(first, minlength=8).double(), probs) > FALSE_ALARM
    accepted = first == guess
    g = torch.Generator().manual_seed(1)
    redraw = torch.multinomial(probs, n, replacement=True, generator=g)
    control = torch.where(accepted, first, redraw)
    assert oracle.chi_square_p(torch.bincount(control, minlength=8).double(), probs) < FALSE_ALARM


def test_rejection_runs_repeat_and_keep_greedy_requests_tokens(impl):
    cases = seeded_cases()
    runs = []
    for _ in range(2):
        engine = build(impl, 4, proposer="ngram", acceptance="rejection")
        ids = [engine.add_request(list(p), params_of(s, seed)) for p, s, seed, _ in cases]
        while engine.has_unfinished():
            engine.step()
        runs.append([engine.output(i).tokens for i in ids])
    assert runs[0] == runs[1]
    greedy_engine = build(impl, 4, proposer=Scripted(greedy_cases(), "mixed"),
                          acceptance="rejection")
    tokens, _ = run_steps(greedy_engine, [p for p, _ in greedy_cases()],
                          GenerationParams(max_new_tokens=NEW))
    assert tokens == [list(t) for _, t in greedy_cases()]


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("options, named", [
    ({"acceptance": "greedy"}, "acceptance"), ({"proposer": 42}, "proposer"), ({"proposer": tiny_checkpoint("tiny_qwen2")}, "vocabulary")])
def test_a_bad_option_is_refused_in_one_line_naming_it(impl, options, named):
    with pytest.raises(BuildError) as refused:
        options.setdefault("speculative_tokens", 2)
        impl.build(CKPT, **options)
    assert named in str(refused.value) and "\n" not in str(refused.value)


# --- the policy and the proposer ---------------------------------------------------------------


def test_a_step_with_more_decodes_than_speculate_below_guesses_nothing(impl):
    """Right guesses, two requests: with speculate_below=1 every step gives each one token (the
    steps are counted); alone, the same request takes k + 1 a step."""
    cases = greedy_cases()[:2]
    params = GenerationParams(max_new_tokens=NEW)
    crowded = build(impl, 4, proposer=Scripted(cases), speculate_below=1)
    tokens, steps = run_steps(crowded, [p for p, _ in cases], params)
    assert tokens == [list(t) for _, t in cases] and steps == NEW
    alone = build(impl, 4, proposer=Scripted(cases), speculate_below=1)
    tokens, steps = run_steps(alone, [cases[0][0]], params)
    assert tokens == [list(cases[0][1])] and steps == 1 + -(-(NEW - 1) // 5)


def test_no_step_guesses_while_a_request_waits(impl):
    """One lane, two requests with right guesses: while the second waits, the first takes a token
    a step; alone, the second takes k + 1 a step (the steps are counted)."""
    cases = greedy_cases()[:2]
    engine = build(impl, 4, proposer=Scripted(cases), max_lanes=1)
    tokens, steps = run_steps(engine, [p for p, _ in cases], GenerationParams(max_new_tokens=NEW))
    assert tokens == [list(t) for _, t in cases]
    assert steps == NEW + 1 + -(-(NEW - 1) // 5)


class Zeros:
    """A proposer that guesses token 0, k times, for every request (mostly wrong); logs the
    number of requests of each call."""

    def __init__(self):
        self.calls = []

    def propose(self, requests, k):
        self.calls.append(len(requests))
        return [[0] * k for _ in requests]


@pytest.mark.parametrize("bar", [100.0, 1.0, 0.0])
def test_speculation_rests_where_passes_keep_fewer_tokens_than_the_bar(impl, bar):
    """Every guess wrong (a pass gives each request one token): under a bar no pass can reach,
    the proposer is asked at the first WINDOW decode steps, then at none of the next REST (one
    more where the last resting step launched the next decode ahead, v14), then again for a
    window, then at none of the next 2 x REST (a second failure in a row rests twice as long);
    under a bar every pass reaches (1 token), or none (0), at every step. The steps are the
    proposer's calls, counted from outside; the tokens are k=0's."""
    policy = impl.package.SpeculationPolicy
    window, rest = policy.WINDOW, policy.REST
    new = 1 + window + rest + window + 2 * rest + window
    prompt, params = [5, 9, 14, 3], GenerationParams(max_new_tokens=new)
    plain = build(impl, 0)
    expected = plain.generate([prompt], params)[0]
    zeros = Zeros()
    engine = build(impl, 4, proposer=zeros, min_tokens_per_pass=bar)
    rid = engine.add_request(prompt, params)
    asked = []
    while engine.has_unfinished():
        before = len(zeros.calls)
        engine.step()
        asked.append(len(zeros.calls) > before)
    assert engine.output(rid).tokens == expected
    decodes = asked[1:]  # the first step computes the prompt
    if bar > 1:
        start = 0
        for length in (rest, 2 * rest):  # a window asked, then a rest, twice
            assert decodes[start:start + window] == [True] * window, (start, decodes)
            resting = decodes[start + window:].index(True)
            assert length <= resting <= length + 1, (start, decodes)
            start += window + resting
        assert decodes[start:start + 2] == [True] * 2, decodes
    else:
        assert all(decodes), decodes


class Reads(TorchDispatchMode):
    """The storages every op of a step read."""

    def __init__(self):
        super().__init__()
        self.storages = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for value in list(args) + list((kwargs or {}).values()):
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(t, torch.Tensor):
                    self.storages.add(t.untyped_storage().data_ptr())
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("how", ["none", "right"])
def test_a_step_with_no_guess_to_verify_runs_the_plain_decode_step(impl, how):
    """Where the proposer guesses nothing, every decode step reads the decode step's token
    buffer (v06's static inputs, which a verifying pass does not use); where it guesses, no
    decode step reads it. Tokens are the oracle's either way."""
    cases = greedy_cases()[:1]
    engine = build(impl, 4, proposer=Scripted(cases, how))
    token_ids = engine.decode_buffers()["token_ids"].untyped_storage().data_ptr()
    rid = engine.add_request(list(cases[0][0]), GenerationParams(max_new_tokens=NEW))
    engine.step()  # the prompt
    read = []
    while engine.has_unfinished():
        with Reads() as reads:
            engine.step()
        read.append(token_ids in reads.storages)
    assert engine.output(rid).tokens == list(cases[0][1])
    # with right guesses only a last step with no room for one is plain
    assert all(read) if how == "none" else not any(read[:-1]), read


class Sequence_:
    def __init__(self, sequence):
        self.sequence = sequence


@pytest.mark.spec(part="proposer")
@pytest.mark.parametrize("sequence, ngram, k, expected", [
    ([1, 2, 3, 1, 2, 3, 1, 2], 3, 4, [3, 1, 2]),          # the latest earlier occurrence
    ([5, 6, 9, 5, 6, 7, 8, 5, 6], 2, 3, [7, 8, 5]),        # not the first one
    ([1, 2, 3, 4, 9, 3, 4], 3, 2, [9, 3]),                 # 3-gram absent: the 2-gram's
    ([4, 5, 6, 7], 3, 2, []),                               # nothing repeats
    ([7, 7], 1, 3, [7]),                                    # a 1-gram, cut at the end
])
def test_the_ngram_proposer_guesses_what_followed_the_latest_match_of_the_longest_ngram(
        impl, sequence, ngram, k, expected):
    proposer = impl.package.NgramProposer(ngram)
    assert proposer.propose([Sequence_(sequence)], k) == [expected]


# --- the allocator under speculation -----------------------------------------------------------


class RollbackPoolMachine(PrefixPoolMachine):
    """v12's prefix-pool machine over v17's pool, with one more rule: a verifying pass. A running
    request grows by its own row and up to `count` guesses (as far as blocks are free), the pass
    writes their K/V (the machine records each block's prefix as the pass fed it: guesses
    included), the first `agree` guesses are the request's real next tokens and the rest are not,
    and the request keeps its own row and the agreeing guesses: truncate, then seal. Every
    invariant of v12's machine holds after it: counts, the free list, and every hashed block
    holding the K/V of the tokens its hash was made from (so no sealed block holds a guess)."""

    POOL = "RollbackPool"

    @precondition(lambda self: self.running)
    @rule(pick=st.integers(0, 1000), count=st.integers(0, 8), agree=st.integers(0, 8))
    def verify_and_roll_back(self, pick, count, agree):
        rid = self._pick(self.running, pick)
        self.write_kv()
        n = self.pool.num_tokens(rid)
        real = self.sequence(rid, n + count + 1)
        agree = min(agree, count)
        fed = real[:n + 1 + agree] + [(t + 1) % POOL_VOCAB for t in real[n + 1 + agree:]]
        grown = 0
        while grown < count + 1 and self.pool.can_append(rid):
            self.pool.append_token(rid)
            grown += 1
        if not grown:
            return
        held, size, table = self.held_by(), self.pool.block_size, self.pool.table(rid)
        for i in range(n // size, -(-(n + grown) // size)):
            assert held[table[i]] == 1, f"the pass writes into block {table[i]}, shared"
            self.content[table[i]] = tuple(fed[:min(n + grown, (i + 1) * size)])
        keep = n + 1 + min(agree, grown - 1)
        free_before = self.pool.free_blocks()
        gone = self.pool.truncate(rid, keep)
        assert self.pool.num_tokens(rid) == keep
        assert self.pool.table(rid) == table[:self.pool.blocks_needed(keep)] and \
            gone == table[self.pool.blocks_needed(keep):]
        assert self.pool.free_blocks() == free_before + list(reversed(gone))
        self.written[rid] = min(self.written.get(rid, 0), keep)
        self.running[rid] = keep
        self.seal_written(rid)


@pytest.mark.spec(first_with="RollbackPool")
def test_verifying_passes_among_shared_blocks_decode_seal_free_and_eviction_keep_every_invariant(
        impl):
    # Examples come from the active profile (ci: 200, stress: 5,000); no settings here.
    run_state_machine_as_test(lambda: RollbackPoolMachine(impl.package))


# --- on a GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("how", ["right", "wrong", "ngram"])
def test_on_cuda_a_verifying_pass_replays_a_verify_graph_and_keeps_the_oracles_tokens(impl, how):
    """float32 on CUDA, where the layers run their kernels and a verifying pass is a decode of
    its rows replayed from a verify graph: every step asks the driver for a graph launch (none
    runs the layers eagerly), and the tokens are the oracle's, alone and in a batch."""
    from spec.support.watchers.replay_watch import CudaLaunches
    cases = greedy_cases()
    proposer = "ngram" if how == "ngram" else Scripted(cases, how)
    engine = impl.build(CKPT, device="cuda", block_size=BLOCK, speculative_tokens=4,
                        min_tokens_per_pass=0.0, proposer=proposer)
    prompt, expected = cases[0]
    rid = engine.add_request(list(prompt), GenerationParams(max_new_tokens=NEW))
    launches = []
    while engine.has_unfinished():
        with CudaLaunches() as seen:
            engine.step()
        launches.append(seen.graphs)
    assert engine.output(rid).tokens == list(expected)
    assert all(n >= 1 for n in launches), launches  # no step ran its passes eagerly
    tokens, _ = run_steps(engine, [p for p, _ in cases], GenerationParams(max_new_tokens=NEW))
    assert tokens == [list(t) for _, t in cases]


# --- tensor parallelism ------------------------------------------------------------------------


def speculative_tokens_on_ranks(ranks, counts, spec, greedy_prompts, sampled):
    """Rank 0: the greedy tokens of greedy_prompts and each (prompt, params)'s seeded tokens,
    from one engine built on every rank, and what its verifying passes kept."""
    engine = ranks.build(spec)
    tokens = engine.generate(greedy_prompts, GenerationParams(max_new_tokens=NEW))
    samples = [engine.generate([p], params)[0] for p, params in sampled]
    return tokens, samples, engine.speculation_stats()


@functools.lru_cache(maxsize=None)
def _tp2_speculating(impl):
    from spec.support.ranks.ranks import spec_for
    from spec.test_v16_tensor_parallel import model_dir, run_or_error
    spec = spec_for(impl, model_dir(FIXTURE), speculative_tokens=4, block_size=BLOCK)
    sampled = [(list(p), params_of(s, seed)) for p, s, seed, _ in seeded_cases()]
    return run_or_error(speculative_tokens_on_ranks, spec, [list(p) for p, _ in greedy_cases()],
                        sampled)


@pytest.mark.spec(needs=SPECULATIVE)
def test_at_tp2_the_ranks_propose_and_verify_alike_and_keep_the_oracles_tokens(impl):
    """Two ranks over gloo, each proposing from its own copy of every sequence and verifying on
    its shard: greedy and seeded tokens are the oracle's, and guesses were kept (a rank that
    proposed otherwise would meet the other's collectives with another row count)."""
    from spec.test_v16_tensor_parallel import result
    (tokens, samples, stats), _ = result(_tp2_speculating(impl))
    assert tokens == [list(t) for _, t in greedy_cases()]
    assert samples == [list(t) for *_, t in seeded_cases()]
    assert stats["accepted"] > 0
