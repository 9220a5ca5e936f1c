"""v15_chunked_prefill: one token budget a step, decodes first, prompts in slices.

What it introduces: build(ckpt, max_step_tokens=budget). A step computes at most `budget` rows.
Every running request past its prompt decodes its one row first; the rest of the budget goes to
the next slices of the prompts being computed, oldest first, then to the first slices of requests
admitted now. A request remembers how much of its sequence is computed and samples its first
token only after the last slice. Rows the prefix cache holds count as computed. A prompt longer
than the budget is computed in slices instead of refused; a request preempted mid-prompt gives
its blocks back and starts its prompt again later, its seeded draws unchanged.

Why v14 needs it: a v14 step computes whole prompts. A long prompt arriving while others decode
either waits for a step with room for all of it, or stalls every running request for as long as
its prefill takes; a prompt longer than max_step_tokens is refused outright.

Core principle: the budget changes when rows are computed, never what is generated. Tokens equal
the oracle's (greedy and seeded) for prompts cut into slices of 1, 4, 16 and 64 rows, with the
prefix cache on, and through preemptions mid-prompt on a tight, poisoned pool. What a step
computes is read from the K/V it stores (spec/support/watchers/block_watch.py): each slice stores exactly
the rows after the ones its request stored before, a step's stored prefill rows and live decode
lanes never exceed the budget, and every running decode gets its row in every step. Nor does a
step compute less than it could: min(budget, rows available), so no request waits while rows of
the step are left, and a waiting prompt is sliced rather than held back whole. Slice graphs give
the oracle's tokens in every request bucket four lanes can fill. The step whose slice ends a
prompt picks the rows that draw with an index made on the device, and on CUDA makes no call that
waits for the GPU (the host keeps launching the decode ahead).

Files to compare: implementations/v15_chunked_prefill/{policy.py, scheduler.py} (TokenBudget;
ChunkedScheduler, SlicedBatch) against implementations/v08_paged_gqa_py/{policy.py, scheduler.py}
(PagedAdmission; PreemptingScheduler) and implementations/v03_request_states/scheduler.py
(Scheduler, Batch);
implementations/v15_chunked_prefill/runner.py (ChunkedRunner.prefill_slices) against
implementations/v12_prefix_cache/runner.py (PrefixRunner.prefill, forward_rows);
implementations/v15_chunked_prefill/request.py against implementations/v05_decode_lanes/request.py;
implementations/v15_chunked_prefill/slices.py (SliceGraphs) against
implementations/v07_cuda_graph/runner.py (GraphRunner), the decode step's graphs.

Tradeoff left visible: a request takes the blocks of its whole sequence when it is admitted, so
a slice never waits for a block, at the price of holding blocks for rows not yet computed; a
prompt's full blocks are shared with the prefix cache only once its last slice is computed; a
step that spends its budget on slices computes fewer prompt rows than v14's whole prefill would,
so the last request's first token comes later (the price of the running requests' steady pace).
A slice pass replays a graph per bucket (rows, requests, context bound, each padded up to a power
of two), so a bucket's first pass stalls its step for the capture (on the H200 about 0.1 s for
the first bucket, whose pass runs once before it is captured; on an H100 20-60 ms for a later
one, captured straight), and padding rows are computed for nothing. A bucket that a captured
graph covers rides the smallest such graph until its third pass, so a shape that comes once (a
prompt's last slice) pays padding rows instead of a stall, and one that keeps coming pays both
twice before it has its own graph.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections import Counter

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from spec.support.oracles import sampling_oracle as oracle
from spec.support.watchers.block_watch import BlockWatch, StepLog
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.oracle import cached_model, greedy
from spec.support.oracles.oracle_cache import on_disk
from spec.support.oracles.prompts import MARGIN, screened
from spec.support.watchers.replay_watch import CudaLaunches, ModelWatch
from torchlet.contract import CHUNKED_PREFILL, GenerationParams, RequestState

pytestmark = pytest.mark.spec(needs=CHUNKED_PREFILL)

FIXTURE = "tiny_llama"
CKPT = tiny_checkpoint(FIXTURE)
VOCAB = CKPT.config.vocab_size
F64 = torch.float64
BLOCK = 4
BUDGETS = (1, 4, 16, 64)
NEW = 6  # tokens compared per long prompt


def build(impl, ckpt=CKPT, overlap=False, **options):
    """Steps in order (overlap=False) unless asked: the block watch reads what one step() call
    computes, and with overlap a call launches the next step's decode too."""
    return impl.build(ckpt, dtype=F64, block_size=BLOCK, overlap=overlap, **options)


@functools.lru_cache(maxsize=None)
@on_disk
def long_cases(count: int = 3) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """(prompt, its NEW oracle tokens) for prompts of 70 to 140 tokens, longer than two slices
    of the largest budget, kept only where the float64 reference's gap stays above MARGIN."""
    g = torch.Generator().manual_seed(15)
    model, found = cached_model(FIXTURE), []
    for _ in range(60):
        length = int(torch.randint(70, 140, (1,), generator=g))
        prompt = tuple(torch.randint(3, VOCAB, (length,), generator=g).tolist())
        ref = greedy(model, list(prompt), NEW, stop_below=MARGIN)
        if len(ref.tokens) == NEW and ref.horizon(MARGIN) == NEW:
            found.append((prompt, tuple(ref.tokens)))
            if len(found) == count:
                return tuple(found)
    raise AssertionError(f"only {len(found)} of 60 long prompts keep a gap of {MARGIN}")


def short_cases() -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(prompt, its first NEW oracle tokens) for the screened prompts of 5 to 30 tokens."""
    return [(p, tuple(ref.tokens[:NEW])) for p, ref in screened(FIXTURE)[:2]]


def cases_for(budget: int):
    """Prompts longer than one slice of `budget`, so each is cut into several."""
    return [c for c in short_cases() + list(long_cases()) if len(c[0]) > budget]


GREEDY = GenerationParams(max_new_tokens=NEW)


def watched(engine, poisoned: bool = True) -> BlockWatch:
    """The block watch over an engine built with poison_free_blocks (unless poisoned=False)."""
    return BlockWatch(engine, VOCAB, poisoned=poisoned, slices=True)


def run_watched(watch, schedule, budget, on_step=lambda watch: None):
    """[(steps before adding, prompt, params)] through the block watch, checking after every
    step that its stored rows and live decode lanes stay within the budget; the requests'
    tokens in schedule order."""
    def after():
        rows = sum(watch.prefilled.values()) + watch.decoded
        assert rows <= budget, f"a step computed {rows} rows on a budget of {budget}"
        on_step(watch)
    ids = watch.run(schedule, after)
    return [watch.engine.output(i).tokens for i in ids]


# --- token parity --------------------------------------------------------------------------


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_prompt_alone_is_cut_into_slices_of_the_budget_and_gets_the_oracles_tokens(impl,
                                                                                  budget):
    """One lane, so nothing decodes beside a prompt: every slice but the last computes exactly
    `budget` rows, each the rows right after the last slice's, and the tokens are the oracle's."""
    for prompt, expected in cases_for(budget)[:1]:
        engine = build(impl, max_running=1, max_step_tokens=budget, poison_free_blocks=True)
        watch, slices = watched(engine), []

        def sliced(w):
            slices.extend(w.prefilled.values())
            if len(slices) < -(-len(prompt) // budget):  # mid-prompt: its cache holds its slices
                assert engine.num_cached_tokens(w.ids[0]) == sum(slices)
        out = run_watched(watch, [(0, list(prompt), GREEDY)], budget, sliced)
        assert out == [list(expected)]
        assert sum(slices) == len(prompt) and len(slices) == -(-len(prompt) // budget), slices
        assert set(slices[:-1]) <= {budget}, f"slices of a {budget}-row budget: {slices}"


@st.composite
def schedules(draw):
    n = draw(st.integers(1, 4))
    cases = short_cases() + list(long_cases())
    return [(draw(st.integers(0, 3)), draw(st.integers(0, len(cases) - 1)),
             draw(st.integers(1, NEW))) for _ in range(n)]


@engine_settings()
@given(schedule=schedules(), budget=st.sampled_from(BUDGETS[1:]),
       cache=st.booleans())
def test_slices_beside_decodes_give_the_oracles_tokens_under_any_arrivals(impl, schedule, budget,
                                                                        cache):
    """Requests arriving at any step over four lanes: slices share each step's budget with the
    running decodes, with the prefix cache on or off; each request gets the oracle's tokens."""
    engine = build(impl, max_running=4, max_step_tokens=budget, prefix_cache=cache,
                   poison_free_blocks=True)
    cases = short_cases() + list(long_cases())
    made = [(gap, list(cases[c][0]), GenerationParams(max_new_tokens=n), list(cases[c][1][:n]))
            for gap, c, n in schedule]
    out = run_watched(watched(engine), [m[:3] for m in made], budget)
    assert out == [m[3] for m in made]


def test_slices_with_the_next_decode_launched_ahead_give_the_oracles_tokens(impl):
    """v14's overlap on: a step that ends a prompt's last slice launches that request's first
    decode before reading its token back; the tokens are still the oracle's."""
    engine = build(impl, overlap=True, max_running=4, max_step_tokens=5)
    cases = short_cases() + list(long_cases()[:2])
    assert engine.generate([list(p) for p, _ in cases], GREEDY) == [list(t) for _, t in cases]


def test_seeded_requests_sliced_draw_the_golden_samples(impl):
    """Sampling with seeds: a request's draws depend on its seed and positions only, so slices
    (and the draw after the last one) leave them as the golden cases have them."""
    engine = build(impl, max_running=2, max_step_tokens=4, poison_free_blocks=True)
    golden = oracle.golden_cases(FIXTURE)[:3]
    schedule = [(0, list(p), GenerationParams(temperature=s.temperature, top_k=s.top_k,
                                              top_p=s.top_p, min_p=s.min_p, seed=seed,
                                              max_new_tokens=len(t))) for p, s, seed, t in golden]
    assert run_watched(watched(engine), schedule, 4) == [list(t) for *_, t in golden]


# --- the budget ---------------------------------------------------------------------------


def step_rows(engine, buffers) -> tuple[int, int]:
    """engine.step(), and the rows it computed, read from what it did rather than from its
    stats: (the slots one cache got outside the decode pass, i.e. its slices' rows; the live
    lanes of its decode pass, those whose context_lens it read above 0)."""
    with StepLog(buffers, VOCAB) as log:
        engine.step()
    prefill = {}
    for s in log.stores:
        if "slot_mapping" not in s.source:
            prefill.setdefault(id(s.target.untyped_storage()), []).extend(s.slots)
    lens = log.read.get("context_lens")  # unread in a step that decodes nothing
    return len(next(iter(prefill.values()), [])), 0 if lens is None else int((lens > 0).sum())


def work_available(engine, ids, lanes: int) -> int:
    """Rows the engine could compute now, read from its requests' outputs (the pool holds them
    all): one for each running request past its prompt, the rest of the prompt of each one in
    it, and the whole prompt of each waiting request, oldest first, that a free lane could take."""
    rows, running, waiting = 0, 0, []
    for i in ids:
        o = engine.output(i)
        if o.state is RequestState.RUNNING:
            running += 1
            rows += 1 if o.tokens else len(o.prompt) - engine.num_cached_tokens(i)
        elif o.state is RequestState.WAITING:
            waiting.append(len(o.prompt))
    return rows + sum(waiting[:lanes - running])


@engine_settings()
@given(schedule=schedules(), budget=st.sampled_from(BUDGETS[1:]), lanes=st.integers(1, 4))
def test_a_step_computes_its_whole_budget_or_all_the_rows_there_are_under_any_arrivals(
        impl, schedule, budget, lanes):
    """Requests arriving at any step on one to four lanes, a pool that holds them all: every
    step computes min(budget, rows available) rows, counted from the K/V its slices store and
    the lanes its decode runs, so no step leaves rows unused while a waiting or half-computed
    prompt could take them. Each request gets the oracle's tokens."""
    engine = build(impl, max_running=lanes, max_step_tokens=budget, prefix_cache=False)
    cases, ids = short_cases() + list(long_cases()), []
    buffers = engine.decode_buffers()

    def step():
        available = work_available(engine, ids, lanes)
        rows, decoded = step_rows(engine, buffers)
        assert rows + decoded == min(budget, available), (
            f"step {engine.last_step_stats().step}: {rows} prompt rows + {decoded} decodes on a "
            f"budget of {budget}, with {available} rows to compute")
    for gap, c, n in schedule:
        for _ in range(gap):
            step()
        ids.append(engine.add_request(list(cases[c][0]), GenerationParams(max_new_tokens=n)))
    while engine.has_unfinished():
        step()
    assert [engine.output(i).tokens for i in ids] == [list(cases[c][1][:n])
                                                      for _, c, n in schedule]


def test_a_prompt_waiting_is_sliced_at_once_and_no_request_waits_behind_it(impl):
    """A request decodes when a long prompt and a short one arrive together, three lanes, a
    budget of 8 rows: the long prompt starts the next step, sliced to the rows the decode
    leaves, instead of waiting for a step with room for all of it; and the short prompt behind
    it starts in the step whose slice ends the long prompt, on the rows that slice leaves.
    Rows are read from the K/V each step stores; the tokens are the oracle's."""
    engine = build(impl, max_running=3, max_step_tokens=8, prefix_cache=False)
    watch = watched(engine, poisoned=False)
    (s1, t1), (s2, t2) = short_cases()
    (long, t0), = long_cases()[:1]
    first = watch.add(list(s1), GREEDY)
    while not engine.output(first).tokens:
        watch.step()
    a, b = watch.add(list(long), GREEDY), watch.add(list(s2), GREEDY)
    done = 0
    while done < len(long):
        watch.step()
        decodes = watch.decoded
        got = watch.prefilled.get(a, 0)
        assert got == min(len(long) - done, 8 - decodes), (
            f"the long prompt got {got} rows beside {decodes} decodes, with "
            f"{len(long) - done} to compute")
        done += got
        left = 8 - decodes - got
        assert watch.prefilled.get(b, 0) == min(len(s2), left), (
            f"the short prompt got {watch.prefilled.get(b, 0)} rows, {left} were left")
    assert watch.prefilled.get(b), "the long prompt's last slice left no rows: a weak schedule"
    while engine.has_unfinished():
        watch.step()
    assert [engine.output(i).tokens for i in (first, a, b)] == [list(t1), list(t0), list(t2)]


def test_every_running_decode_gets_its_row_in_every_step_beside_slices(impl):
    """Three requests decode while long prompts arrive: in every step each of them that was
    past its prompt gains one token, and the step stays within the budget."""
    engine = build(impl, max_running=4, max_step_tokens=8,
                   poison_free_blocks=True)
    watch = watched(engine)
    shorts = [watch.add(list(p), GenerationParams(max_new_tokens=30, ignore_eos=True))
              for p, _ in short_cases()]
    while any(not engine.output(i).tokens for i in shorts):
        watch.step()
    for prompt, _ in long_cases()[:2]:
        watch.add(list(prompt), GREEDY)
    sliced = 0
    while engine.has_unfinished():
        before = {i: len(o.tokens) for i in watch.ids
                  if (o := engine.output(i)).state is RequestState.RUNNING and o.tokens}
        watch.step()
        assert sum(watch.prefilled.values()) + watch.decoded <= 8
        sliced += bool(watch.prefilled)
        for i, n in before.items():
            assert len(engine.output(i).tokens) == n + 1, f"request {i} got no token this step"
    assert sliced >= 2 * len(long_cases()[0][0]) // 8 // 2, "the long prompts were not sliced"


def test_the_rest_of_the_budget_goes_to_the_oldest_prompt_first(impl):
    """Two long prompts admitted together: while the first is mid-prompt, the second computes
    rows only in the step whose slice ends the first's prompt."""
    engine = build(impl, max_running=2, max_step_tokens=16)
    watch = watched(engine, poisoned=False)
    (a_prompt, _), (b_prompt, _) = long_cases()[:2]
    a, b = watch.add(list(a_prompt), GREEDY), watch.add(list(b_prompt), GREEDY)
    stored = {a: 0, b: 0}
    while not engine.output(b).tokens:
        watch.step()
        if watch.prefilled.get(b) and stored[a] < len(a_prompt):
            assert stored[a] + watch.prefilled.get(a, 0) == len(a_prompt), (
                f"the newer prompt got {watch.prefilled[b]} rows while the older one had "
                f"{len(a_prompt) - stored[a]} rows left")
        for i in stored:
            stored[i] += watch.prefilled.get(i, 0)
    assert stored == {a: len(a_prompt), b: len(b_prompt)}


def test_a_cached_prefix_counts_as_computed(impl):
    """A prompt whose first blocks the cache holds computes its first slice from the first row
    after them, so it needs fewer steps than the same prompt uncached."""
    prompt = list(long_cases()[0][0])
    engine = build(impl, max_running=1, max_step_tokens=16)
    watch = watched(engine, poisoned=False)
    run_watched(watch, [(0, prompt, GenerationParams(max_new_tokens=1))], 16)
    slices = []
    run_watched(watch, [(0, prompt[:-1] + [7], GenerationParams(max_new_tokens=1))], 16,
                lambda w: slices.extend(w.prefilled.values()))
    hit = (len(prompt) - 1) // BLOCK * BLOCK
    assert sum(slices) == len(prompt) - hit, f"{slices}: the {hit} cached rows were computed"
    assert len(slices) == -(-(len(prompt) - hit) // 16)


def test_a_two_thousand_token_prompt_never_makes_a_step_compute_more_than_the_budget(impl):
    """While a 2,000-token prompt arrives, three running requests keep one token a step, and no
    step computes more than its budget of 256 rows, counted from the K/V the step stores and the
    lanes its decode pass runs."""
    ckpt = dataclasses.replace(CKPT, config=dataclasses.replace(CKPT.config,
                                                                max_position=2304))
    engine = build(impl, ckpt, max_running=4, max_step_tokens=256)
    running = [engine.add_request([3 + i, 9, 27], GenerationParams(max_new_tokens=16,
                                                                   ignore_eos=True))
               for i in range(3)]
    engine.step()
    long = engine.add_request([5 + i % 300 for i in range(2000)],
                              GenerationParams(max_new_tokens=1))
    buffers, steps = engine.decode_buffers(), 0
    while engine.output(long).state is not RequestState.FINISHED:
        rows, lanes = step_rows(engine, buffers)
        steps += 1
        assert rows + lanes <= 256, f"step {steps}: {rows} prompt rows + {lanes} decodes"
        assert lanes == 3, f"step {steps}: {lanes} of the 3 running requests decoded"
    assert steps == -(-2000 // 253), f"the long prompt took {steps} steps of 253 rows"
    assert all(len(engine.output(i).tokens) == 1 + steps for i in running)


# --- preemption mid-prompt ------------------------------------------------------------------


def test_a_request_preempted_mid_prompt_starts_again_and_every_request_gets_the_oracles_tokens(
        impl):
    """A tight, poisoned pool with the prefix cache on: requests sharing prefixes, sliced by a
    small budget, preempt one another, and one is preempted before its prompt is done. It gives
    its blocks back (they turn NaN), computes its prompt again, and every token is the oracle's."""
    engine = build(impl, max_running=3, max_step_tokens=8, num_blocks=57,
                   poison_free_blocks=True)
    (p0, t0), (p1, t1) = long_cases()[:2]
    schedule = [(0, list(p0), GREEDY), (0, list(p0) + list(t0[:3]), GenerationParams(
        max_new_tokens=NEW - 3)), (2, list(p1), GREEDY)]
    watch, mid_prompt = watched(engine), set()

    def preempted_in_prompt(w):
        for i in w.ids:
            o = engine.output(i)
            if o.state is RequestState.WAITING and not o.tokens and i in w.seen_sliced:
                mid_prompt.add(i)
        w.seen_sliced.update(w.prefilled)
    watch.seen_sliced = set()
    out = run_watched(watch, schedule, 8, preempted_in_prompt)
    assert out == [list(t0), list(t0[3:]), list(t1)]
    assert mid_prompt, f"no request was preempted mid-prompt ({engine.num_preemptions} in all)"


def test_a_request_preempted_after_its_prompt_recomputes_its_prompt_and_tokens_in_slices(impl):
    """Requests preempted while they decode come back with their prompt and tokens to compute,
    in slices of the budget, and go on with the oracle's tokens."""
    engine = build(impl, max_running=3, max_step_tokens=8, num_blocks=13,
                   poison_free_blocks=True)
    cases = [(p, ref.tokens) for p, ref in screened(FIXTURE)[:3]]
    schedule = [(0, list(p), GenerationParams(max_new_tokens=len(t))) for p, t in cases]
    watch, recomputed = watched(engine), set()

    def preempted_with_tokens(w):
        recomputed.update(i for i in w.ids if engine.output(i).state is RequestState.WAITING
                          and engine.output(i).tokens)
    assert run_watched(watch, schedule, 8, preempted_with_tokens) == [list(t) for _, t in cases]
    assert recomputed, "no request was preempted after its prompt"


# --- bad input ------------------------------------------------------------------------------


def test_a_budget_below_the_running_decodes_or_zero_is_refused_and_a_long_prompt_is_not(impl):
    with pytest.raises(ValueError, match="max_step_tokens"):
        build(impl, max_running=4, max_step_tokens=3)
    with pytest.raises(TypeError, match="max_step_tokens"):  # check_build's BuildError
        build(impl, max_running=4, max_step_tokens=0)
    engine = build(impl, max_running=4, max_step_tokens=4)
    prompt, expected = long_cases()[0]
    rid = engine.add_request(list(prompt), GREEDY)
    while engine.has_unfinished():
        engine.step()
    assert engine.output(rid).tokens == list(expected)


# --- a slice that ends a prompt waits for nothing --------------------------------------------
# The rows that draw are picked from the pass's hidden rows. On a GPU an index made from a host
# list is copied from pageable memory, and that copy waits for the GPU to finish the pass: the
# host stalls where it would be launching the next decode (4 ms a finishing slice on an H100,
# docs/perf-notes.md).


class PassIndices(TorchDispatchMode):
    """Every index op over a [rows, hidden] tensor a step dispatches (the pass's hidden rows
    among them): its row count, and whether the index it took came from a host list: lifted
    from one (aten.lift_fresh, what indexing with a Python list, or torch.tensor on one,
    dispatches first), or computed from such a tensor."""

    def __init__(self, hidden: int):
        super().__init__()
        self.hidden, self.lifted, self.picks = hidden, [], []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten.index.Tensor, torch.ops.aten.index_select.default) \
                and args[0].dim() == 2 and args[0].shape[1] == self.hidden:
            index = args[1] if func is torch.ops.aten.index.Tensor else [args[2]]
            self.picks.append((args[0].shape[0], any(self.from_host(i) for i in index)))
        if func is torch.ops.aten.lift_fresh.default or any(map(self.from_host,
                                                                tree_leaves((args, kwargs)))):
            self.lifted.extend(o for o in tree_leaves(out) if isinstance(o, torch.Tensor))
        return out

    def from_host(self, t) -> bool:
        """Lifted from a host list, or computed from such a tensor."""
        return any(t is x for x in self.lifted)


@pytest.mark.spec(part="runner")
def test_a_slice_that_ends_a_prompt_picks_the_row_that_draws_by_an_index_made_on_the_device(impl):
    """A request decodes while a long prompt is computed in slices of 7 rows (a budget of 8):
    the step whose slice ends the prompt picks rows from the pass's hidden rows, and no step
    picks them with an index that was a host list. Both requests get the oracle's tokens."""
    engine = build(impl, max_running=2, max_step_tokens=8)
    (short, short_tokens), (prompt, expected) = short_cases()[0], long_cases()[0]
    first = engine.add_request(list(short), GenerationParams(max_new_tokens=4 * NEW,
                                                             ignore_eos=True))
    engine.step()
    rid = engine.add_request(list(prompt), GREEDY)
    picked = []  # a step's picks from its pass's hidden rows: whether each index was lifted
    while not engine.output(rid).tokens:
        with PassIndices(CKPT.config.hidden_size) as seen:
            engine.step()
        stats = engine.last_step_stats()
        assert stats.num_prefill_tokens == 7 or engine.output(rid).tokens, stats
        picked.append([lifted for rows, lifted in seen.picks if rows == stats.num_prefill_tokens])
    assert len(picked) == -(-len(prompt) // 7), "the prompt was not cut into slices of 7 rows"
    assert picked[-1], "the slice that ends the prompt picked no row from its pass"
    assert not any(map(any, picked)), f"each slice's picks, lifted from a host list or not: {picked}"
    while engine.has_unfinished():
        engine.step()
    assert engine.output(first).tokens[:NEW] == list(short_tokens)
    assert engine.output(rid).tokens == list(expected)


@contextlib.contextmanager
def synchronizing_calls():
    """The calls CUDA's sync debug mode counts as synchronizing while inside, each as the
    implementations' frames that made it (the mode warns from C++, naming no Python line)."""
    import traceback
    import warnings

    calls = []

    def seen(message, *_):
        if "called a synchronizing" in str(message):
            calls.append([f"{f.filename.split('implementations/')[-1]}:{f.lineno} {f.name}"
                          for f in traceback.extract_stack() if "implementations/" in f.filename])

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = seen
            yield calls
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
@pytest.mark.spec(part="runner")
def test_on_cuda_a_step_whose_slice_ends_a_prompt_beside_a_decode_makes_no_synchronizing_call(impl):
    """float32 on CUDA, the next decode launched ahead: a request decodes while a long prompt is
    computed in slices. No step of the prompt's, the one whose slice ends it included, makes a
    call that CUDA's sync debug mode counts as synchronizing (a warm-up prompt of the same
    length first, so that every slice bucket is captured before). Both get the oracle's tokens."""
    engine = impl.build(CKPT, device="cuda", block_size=BLOCK, max_running=2, max_step_tokens=8,
                        prefix_cache=False)
    (short, short_tokens), (prompt, expected) = short_cases()[0], long_cases()[0]
    warm = engine.add_request([(t + 1) % VOCAB for t in prompt], GenerationParams(max_new_tokens=2))
    while engine.has_unfinished():
        engine.step()
    first = engine.add_request(list(short), GenerationParams(max_new_tokens=4 * NEW,
                                                             ignore_eos=True))
    engine.step()
    rid = engine.add_request(list(prompt), GREEDY)
    syncs = []  # (step, the implementation's frames that made the call) of each sync counted
    step = 0
    while not engine.output(rid).tokens:
        torch.cuda.synchronize()
        with synchronizing_calls() as calls:
            engine.step()
        syncs += [(step, frames) for frames in calls]
        step += 1
    assert not syncs, syncs
    while engine.has_unfinished():
        engine.step()
    assert engine.output(first).tokens[:NEW] == list(short_tokens)
    assert engine.output(rid).tokens == list(expected)


# --- slice passes replayed from graphs, where the layers run their kernels ---------------------
# On a GPU an eager slice step is host-bound (launches, not the GPU's work, set its time), so
# where graphs are on and the layers run their kernels a slice pass replays a graph captured at
# the first pass of its bucket (rows, requests and context bound, each padded up). On CPU that
# path runs under the interpreter (the `kernel_path` mark), in float32, the kernels' CPU dtype.


# What a replayed slice step still runs eagerly: the rows that draw, then the LM head on them,
# and the greedy draw's argmax, which the sampler asks of the model's ops (v13's kernel, whose
# input check is `check`).
TAIL = {"last_rows", "lm_head", "FusedOps.argmax", "argmax_rows", "check"}


def on_kernels(impl, **options):
    return impl.build(CKPT, dtype=torch.float32, block_size=BLOCK, poison_free_blocks=True,
                      **options)


class SliceStores(TorchDispatchMode):
    """The slots of every K/V store a step dispatches outside its decode pass (whose slots are
    decode_buffers()' slot_mapping): the slice passes' stores, replayed ones included. A store
    is v10's store_kv or, from v13, rope_split storing as it splits (its last argument)."""

    def __init__(self, decode_slots: torch.Tensor):
        super().__init__()
        self.decode_slots, self.slots = decode_slots, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._opname in ("store_kv", "rope_split_store") and args[-1] is not self.decode_slots:
            self.slots.extend(args[-1].tolist())
        return func(*args, **(kwargs or {}))


@pytest.mark.spec(kernel_path=True, part="runner", first_with="SliceGraphs")
def test_a_slice_after_the_first_of_its_bucket_replays_a_graph_and_gets_the_oracles_tokens(impl):
    """A prompt alone, in slices of 4 rows: every slice falls in one bucket, so the first slice
    step captures and a later one replays (the second and the last are watched): the only model
    functions it enters pick the rows that draw and run the LM head on them. Every slice stores
    exactly its next rows, each once a layer, and the padding rows of its bucket only into the
    null block; the tokens are the oracle's."""
    prompt, expected = max(short_cases(), key=lambda c: len(c[0]))
    assert len(prompt) > 8, "a prompt of three slices or more"
    engine = on_kernels(impl, max_running=1, max_step_tokens=4, overlap=False)
    rid = engine.add_request(list(prompt), GenerationParams(max_new_tokens=2))
    slot_mapping, entered, done = engine.decode_buffers()["slot_mapping"], [], 0
    slices = -(-len(prompt) // 4)
    while done < len(prompt):
        # The model watch's profile hook slows the interpreter's kernels several times over:
        # it watches the second slice and the last, the first (the capture) not.
        watched = len(entered) in (1, slices - 1)
        with (ModelWatch(impl) if watched else contextlib.nullcontext()) as watch, \
                SliceStores(slot_mapping) as stores:
            engine.step()
        now = engine.num_cached_tokens(rid)
        table = engine.block_tables()[rid]
        rows = {table[p // BLOCK] * BLOCK + p % BLOCK for p in range(done, min(now, len(prompt)))}
        # Every layer stores each row once: the real slots, as many times each, are its rows;
        # any other slot lies in the null block.
        real = Counter(s for s in stores.slots if s >= BLOCK)
        assert set(real) == rows and len(set(real.values())) == 1, (
            f"positions {done}..{now}: stored {sorted(real.items())}, its rows are {sorted(rows)}")
        entered.append(set(watch.model_calls) if watched else set())
        assert entered[-1] <= TAIL, f"slice {len(entered) - 1} ran the model's code: " \
                                    f"{sorted(entered[-1])}"
        done = now
    assert len(entered) == slices
    while engine.has_unfinished():
        engine.step()
    assert engine.output(rid).tokens == list(expected[:2])


@pytest.mark.spec(kernel_path=True, part="runner", first_with="SliceGraphs")
def test_slices_replayed_from_graphs_beside_decodes_give_the_oracles_tokens(impl):
    """Two lanes, slices of 4 rows beside a decode, the prefix cache on and the next decode
    launched ahead: each request gets the oracle's tokens."""
    engine = on_kernels(impl, max_running=2, max_step_tokens=4, overlap=True)
    cases = short_cases()
    assert engine.generate([list(p) for p, _ in cases], GREEDY) == [list(t) for _, t in cases]


# Prompt lengths of the passes below, four lanes and a budget of 20 rows, each pass one step of
# whole prompts: one alone (its 7 rows padded to 16 by a padding request: requests padded to
# 4), four that fill 16 rows (no padding request: 4, replayed with other prompts), and four of
# 10 rows (four requests and the padding one: 8).
BUCKET_PASSES = ((7,), (3, 4, 4, 5), (1, 2, 3, 4))


@functools.lru_cache(maxsize=None)
@on_disk
def first_tokens(lengths: tuple[int, ...], seed: int) -> tuple[tuple[tuple[int, ...], int], ...]:
    """(prompt, its oracle's first token) for a prompt of each length, kept only where the
    float64 reference's gap is above MARGIN."""
    g = torch.Generator().manual_seed(seed)
    model, found = cached_model(FIXTURE), []
    for length in lengths:
        for _ in range(30):
            prompt = tuple(torch.randint(3, VOCAB, (length,), generator=g).tolist())
            ref = greedy(model, list(prompt), 1, stop_below=MARGIN)
            if ref.horizon(MARGIN) == 1:
                found.append((prompt, ref.tokens[0]))
                break
        else:
            raise AssertionError(f"no prompt of {length} tokens keeps a gap of {MARGIN}")
    return tuple(found)


class SliceBuckets(TorchDispatchMode):
    """(rows, requests) of every context attention a step dispatches, replayed ones included:
    the bucket its pass was padded to (rows, and requests with the padding one)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._opname == "context_attention":
            self.seen.append((args[0].shape[0], args[3].shape[0] - 1))
        return func(*args, **(kwargs or {}))


@pytest.mark.spec(kernel_path=True, part="runner", first_with="SliceGraphs")
def test_slice_graphs_of_every_request_bucket_replay_and_give_the_oracles_tokens(impl):
    """Four lanes, so a slice pass holds one to four requests, padded to 4 or, where a padding
    request joins four, to 8 (read from the context attention's shapes): a pass alone, four
    requests without padding rows (replaying the first pass's graph with other inputs), and four
    with them, each through its bucket's graph. Each request's first token is the oracle's."""
    engine = on_kernels(impl, max_running=4, max_step_tokens=20, overlap=False)
    buckets = Counter()
    for k, lengths in enumerate(BUCKET_PASSES):
        cases = first_tokens(lengths, k)
        ids = [engine.add_request(list(p), GenerationParams(max_new_tokens=1)) for p, _ in cases]
        with SliceBuckets() as watch:
            engine.step()  # one slice pass: the whole prompts, and each draws its token
        assert not engine.has_unfinished(), f"lengths {lengths} took more than one step"
        assert len(set(watch.seen)) == 1, f"lengths {lengths}: passes {watch.seen}"
        buckets[watch.seen[0]] += 1
        assert [engine.output(i).tokens for i in ids] == [[t] for _, t in cases], lengths
    # Two buckets for three passes: the second pass replayed the first's graph.
    assert len(buckets) == 2 and {requests for _, requests in buckets} == {4, 8}, buckets


# Passes of whole prompts, four lanes and a budget of 40 rows, in order, with the bucket each
# runs in and whether its step captures: 30 rows (bucket 32 rows x 4 requests, the first: no
# graph covers it); 9 rows, whose own bucket (16 x 4) has no graph, so it rides the 32-row one;
# four requests of 9 rows (16 x 8 with the padding request: the 32 x 4 graph has no room for
# that request, so it is captured); 9 rows again, now riding the smallest cover, 16 x 8; and 9
# rows a third time, where 16 x 4 is captured (its replays are the specs' above).
COVERED_PASSES = (((30,), (32, 4), True), ((9,), (32, 4), False), ((2, 2, 2, 3), (16, 8), True),
                  ((9,), (16, 8), False), ((9,), (16, 4), True))


@pytest.mark.spec(kernel_path=True, part="runner", first_with="SliceGraphs")
def test_a_slice_bucket_rides_the_smallest_captured_graph_that_covers_it_until_its_third_pass(
        impl):
    """A capture stalls its step, so a bucket with no graph whose pass fits a captured one (rows,
    a padding request beside them, context bound) replays the smallest such graph until its
    third pass captures its own. Read from outside, from the context attention ops each step
    dispatches: their rows and requests (the bucket the pass ran in), and how many passes (on a
    CPU a capture records its pass by running it, then replays it: two; a replay, one). Each
    request's first token is the oracle's, in whichever graph its pass ran."""
    engine = on_kernels(impl, max_running=4, max_step_tokens=40, overlap=False)
    layers = CKPT.config.num_layers
    for k, (lengths, bucket, captures) in enumerate(COVERED_PASSES):
        cases = first_tokens(lengths, 20 + k)
        ids = [engine.add_request(list(p), GenerationParams(max_new_tokens=1)) for p, _ in cases]
        with SliceBuckets() as buckets:
            engine.step()
        assert not engine.has_unfinished(), f"pass {k}: lengths {lengths} took more than a step"
        assert set(buckets.seen) == {bucket}, f"pass {k}: ran in {set(buckets.seen)}, not {bucket}"
        passes = len(buckets.seen) / layers
        assert passes == (2 if captures else 1), (
            f"pass {k}: {'a capture' if captures else 'a replay'} expected, {passes} passes")
        assert [engine.output(i).tokens for i in ids] == [[t] for _, t in cases], lengths


@pytest.mark.gpu
@pytest.mark.spec(part="runner")
def test_on_cuda_a_replayed_slice_step_launches_a_graph_not_the_layers_kernels(impl):
    """float32 on CUDA, where the layers run their kernels: a prompt alone in slices of 4 rows.
    With graphs on, every slice step after its bucket's first asks the driver for one graph
    launch and a quarter or less of the kernels the same slice launches eagerly (graphs off:
    no graph launch); the tokens are the oracle's both ways."""
    prompt, expected = max(short_cases(), key=lambda c: len(c[0]))
    launched = {}
    for graphs in (True, False):
        engine = impl.build(CKPT, device="cuda", block_size=BLOCK, max_running=1,
                            max_step_tokens=4, overlap=False, use_graphs=graphs)
        rid = engine.add_request(list(prompt), GenerationParams(max_new_tokens=2))
        launched[graphs] = []
        while engine.num_cached_tokens(rid) < len(prompt):
            with CudaLaunches() as launches:
                engine.step()
            launched[graphs].append((launches.graphs, launches.kernels, launches.calls))
        while engine.has_unfinished():
            engine.step()
        assert engine.output(rid).tokens == list(expected[:2]), f"use_graphs={graphs}"
    for k, ((graphs, kernels, calls), (eager_graphs, eager, _)) in enumerate(
            zip(launched[True][1:], launched[False][1:]), 1):
        assert graphs == 1 and eager_graphs == 0, f"slice {k}: {calls}"
        assert 4 * kernels <= eager, f"slice {k}: {kernels} kernels replayed, {eager} eager"


@pytest.mark.gpu
@pytest.mark.spec(part="runner")
def test_on_cuda_only_the_first_slice_bucket_runs_its_pass_before_capturing_it(impl):
    """float32 on CUDA, BUCKET_PASSES' three passes: the first bucket's capture runs its pass
    once first (recorded: the check for host reads, and the libraries' first calls), then the
    capture; the second bucket, the same code on other shapes, is captured straight, so its
    step dispatches the pass once and stalls the step for less (a capture comes mid-serving;
    docs/perf-notes.md); the third pass replays the first bucket's graph and dispatches no
    attention. Counted from the context attention ops each step dispatches, a layer each a
    pass. Each request's first token is the oracle's."""
    engine = impl.build(CKPT, device="cuda", block_size=BLOCK, max_running=4,
                        max_step_tokens=20, overlap=False)
    layers = CKPT.config.num_layers
    passes = []
    for k, lengths in enumerate((BUCKET_PASSES[0], BUCKET_PASSES[2], BUCKET_PASSES[1])):
        cases = first_tokens(lengths, (0, 2, 1)[k])
        ids = [engine.add_request(list(p), GenerationParams(max_new_tokens=1)) for p, _ in cases]
        with SliceBuckets() as watch:
            engine.step()
        assert not engine.has_unfinished(), f"lengths {lengths} took more than one step"
        passes.append(len(watch.seen) / layers)
        assert [engine.output(i).tokens for i in ids] == [[t] for _, t in cases], lengths
    assert passes == [2, 1, 0], passes
