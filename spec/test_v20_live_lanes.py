"""v20_live_lanes: a decode step sized by the requests alive now, not by the highest lane ever
handed out.

What it introduces: a running request's lane may move down. Before a pass feeds its requests'
lanes (a decode step, a verifying pass), if v07's graph bucket for the highest lane in use is
larger than the bucket for the number of requests holding lanes, the requests in the lanes at
or past that number move into the free lanes below it, lowest first; their K/V stays in its
blocks, and only their rows of the step's inputs and of the sampler's settings are written where
they now are. lane_of() names the lane a request holds now; a newcomer still takes the lowest
free lane.

Why v19 needs it: from v05 a lane was a request's address for life, and a pass ran lanes 0 ..
the highest lane in use. A batch that shrinks as its requests finish kept replaying the graph of
the batch it had been: one request left in lane 200 of 256 kept every step at 256 rows, and on
the H200 the nano-vllm workload's 1,023 decode steps averaged 131 requests yet mostly replayed
the 256-lane graph (issue 48).

Core principle: a pass runs the smallest bucket that holds the requests holding lanes, and the
rows moving changes nothing else. Checked over random arrival schedules, greedy and seeded, in
order and with overlap (v14): every decode pass feeds exactly that bucket's rows (the meter
counts the rows of every product); every request's tokens are the oracle's; and, run in order
under the block watch (spec/support/watchers/block_watch.py), the lane that carries a request
(found from what the pass read: its token, position, context and block table) feeds its newest
token through a table that reaches the slots its earlier tokens were stored at, stores its new
K/V in its own last block (its K/V never moves), leaves idle lanes on the null block, and is the
lane lane_of() names. Seeded requests that move keep drawing with their own settings, and with
speculation on the verifying passes keep the oracle's tokens too. Where no lane moves, v20
dispatches v19's ops one for one (checked here), so the earlier pages skip it
(spec/support/collection/rule.py) and this page covers the moves: beside prompt slices, the
prefix cache and preemptions, with overlap, under a grammar's redraws (settle reads the launch's
logits by lane) and in speculation's verifying passes.

Files to compare: implementations/v20_live_lanes/kv.py (grow, compact) against
implementations/v05_decode_lanes/kv.py (free_lane) and implementations/v07_cuda_graph/runner.py
(the bucket a pass replays); implementations/v20_live_lanes/sampler.py (follow) against
implementations/v11_sampling/sampler.py (bind).

Tradeoff left visible: a move costs the sampler's settings written again for each moved request
(small copies the host waits for), so v20 moves rows only where that shrinks the pass, not
whenever a lane frees, and a batch between two buckets still pads to the larger (130 requests
run v07's 160-lane graph). `torchlet bench gpu-workload` measures what the smaller passes buy
(docs/benchmarks.md): on an H100, v19 2.58 s, v20 2.32 s. Not run here: moves under tensor parallelism,
where each rank's K/V part moves its requests by the same rule over the same state (v16 keeps
the ranks' parts in step), so the ranks should agree; the GPU spec runs one device.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from spec.support.collection import exports, trees
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles import sampling_oracle as oracle
from spec.support.oracles.prompts import screened
from spec.support.watchers.block_watch import BlockWatch
from spec.support.watchers.meter import TokenMeter
from spec.support.watchers.op_trace import op_trace
from torchlet.contract import LIVE_LANES, GenerationParams

pytestmark = pytest.mark.spec(needs=LIVE_LANES)

FIXTURE = "tiny_llama"
CKPT = tiny_checkpoint(FIXTURE)
VOCAB = CKPT.config.vocab_size
F64 = torch.float64
BLOCK = 4


def bucket(held: int, lanes: int) -> int:
    """The rows the page promises a pass over `held` requests: the smallest of 1, 2, 4, 8 ..
    (below the lane count), then all the lanes, that holds them."""
    b = 1
    while b < held:
        b *= 2
    return min(b, lanes)


def cases() -> list[tuple[list[int], GenerationParams, list[int]]]:
    """(prompt, params, the oracle's tokens): four greedy prompts (24 tokens each, screened for a
    gap) and four seeded ones (12 tokens, each filter switched on, kept where every draw is
    stable)."""
    greedy = [(list(p), GenerationParams(max_new_tokens=24), ref.tokens)
              for p, ref in screened(FIXTURE)]
    seeded = [(list(p), GenerationParams(max_new_tokens=len(t), temperature=s.temperature,
                                         top_k=s.top_k, top_p=s.top_p, min_p=s.min_p, seed=seed),
               list(t)) for p, s, seed, t in oracle.golden_cases(FIXTURE)]
    return greedy + seeded


def cut(case, n: int):
    prompt, params, tokens = case
    return prompt, GenerationParams(**{**vars(params), "max_new_tokens": n}), tokens[:n]


class RowWatch:
    """Steps an engine (through a block watch, when given one) and checks each step's decode
    pass: it fed bucket(requests holding lanes as it ran) rows to every product. The requests
    holding lanes when the pass ran are those that held one as the step began and those it
    admitted (a request finishing in the step gives its lane back after the pass)."""

    def __init__(self, engine, lanes: int, watch: BlockWatch | None = None):
        self.engine, self.lanes, self.watch = engine, lanes, watch
        self.ids: list[int] = []
        self.prompts: dict[int, list[int]] = {}
        self.decode_rows: list[int] = []

    def add(self, prompt, params) -> int:
        i = self.watch.add(prompt, params) if self.watch else self.engine.add_request(prompt,
                                                                                   params)
        self.ids.append(i)
        self.prompts[i] = prompt
        return i

    def step(self):
        e = self.engine
        holding = {i for i in self.ids if e.lane_of(i) is not None}
        ran = e.last_step_stats()
        with TokenMeter(CKPT) as meter:
            self.watch.step() if self.watch else e.step()
        stats = e.last_step_stats()
        if stats is None or ran is not None and stats.step == ran.step:  # nothing to run
            assert not meter.passes(), "a step with nothing to run ran a pass"
            return
        passes, fed = meter.passes(), meter.fed()
        newcomers = [t for i in stats.prefill_ids for t in self.prompts[i]]
        decodes = [p for p, ids in zip(passes, fed) if ids != newcomers]
        if len(decodes) == len(passes) and newcomers:
            raise AssertionError(f"no pass fed the newcomers' prompts {newcomers}: {fed}")
        assert len(decodes) <= 1, f"{len(decodes)} decode passes in one step: {decodes}"
        for rows in decodes:
            assert len(set(rows)) == 1, f"layers of one pass were fed different rows: {rows}"
            held = len(holding | set(stats.prefill_ids))
            assert rows[0] == bucket(held, self.lanes), (
                f"a decode pass over {held} requests holding lanes fed {rows[0]} rows, not "
                f"bucket {bucket(held, self.lanes)} of {self.lanes} lanes")
            self.decode_rows.append(rows[0])

    def run(self, schedule) -> list[list[int]]:
        for gap, prompt, params in schedule:
            for _ in range(gap):
                self.step()
            self.add(prompt, params)
        while self.engine.has_unfinished():
            self.step()
        return [list(self.engine.output(i).tokens) for i in self.ids]


def build(impl, lanes: int, overlap: bool = False, **options):
    return impl.build(CKPT, dtype=F64, max_lanes=lanes, block_size=BLOCK, overlap=overlap,
                      prefix_cache=False, **options)


@st.composite
def schedules(draw):
    """Up to six requests of the cases, each cut to 1-8 tokens, arriving 0-3 steps apart."""
    n = draw(st.integers(1, 6))
    return [(draw(st.integers(0, 3)), draw(st.integers(0, 7)), draw(st.integers(1, 8)))
            for _ in range(n)]


@pytest.mark.spec(engine_parts=True)
@given(schedule=schedules(), lanes=st.integers(1, 6), overlap=st.booleans())
@engine_settings()
def test_for_any_arrival_schedule_each_decode_pass_runs_the_smallest_bucket_holding_the_live_requests(
        impl, schedule, lanes, overlap):
    """In order the block watch checks every lane the pass ran as well (its request found from
    what the pass read); with overlap the pass watched is the decode a step launches ahead.
    Idle lanes carry garbage (poison_inactive_lanes), freed blocks NaN: a moved request that
    read a lane or a block not its own would show it."""
    engine = build(impl, lanes, overlap=overlap, poison_free_blocks=True,
                   poison_inactive_lanes=True)
    watch = None if overlap else BlockWatch(engine, VOCAB, poisoned=True)
    made = [(gap, *cut(cases()[c], n)) for gap, c, n in schedule]
    tokens = RowWatch(engine, lanes, watch).run([m[:3] for m in made])
    assert tokens == [m[3] for m in made]


def test_requests_left_in_high_lanes_move_down_and_the_pass_shrinks_with_them(impl):
    """Lanes 0 and 1 hold greedy requests of one and two tokens, lanes 2 and 3 seeded ones of
    twelve. Lane 0 frees at the prompt's pass, yet three requests need the 4-lane pass anyway;
    once lane 1 frees too, the seeded ones move into lanes 0 and 1 and every later pass runs 2
    rows, not 4, replaying the 2-lane graph; they draw the oracle's samples throughout, each
    with its own settings in its new lane."""
    engine = build(impl, 4)
    all_cases = cases()
    made = [cut(all_cases[0], 1), cut(all_cases[1], 2), all_cases[4], all_cases[5]]
    watch = RowWatch(engine, 4, BlockWatch(engine, VOCAB))
    ids = [watch.add(p, params) for p, params, _ in made]
    watch.step()
    assert [engine.lane_of(i) for i in ids] == [None, 1, 2, 3]
    watch.step()
    assert [engine.lane_of(i) for i in ids] == [None, None, 2, 3]
    ran = sum(engine.graph_stats()[2].values())
    watch.step()
    assert [engine.lane_of(i) for i in ids[2:]] == [0, 1]
    while engine.has_unfinished():
        watch.step()
    assert watch.decode_rows == [4] + [2] * 10
    assert sum(engine.graph_stats()[2].values()) - ran == 10  # the 2-lane graph, every time
    assert [list(engine.output(i).tokens) for i in ids] == [t for *_, t in made]


@pytest.mark.spec(engine_parts=True)
@given(schedule=schedules(), lanes=st.integers(2, 5), budget=st.sampled_from([None, 6, 12]),
       cache=st.booleans(), tight=st.booleans())
@engine_settings()
def test_moves_beside_slices_a_prefix_cache_and_preemption_keep_every_lane_and_block_right(
        impl, schedule, lanes, budget, cache, tight):
    """The engine's other ideas while requests move: prompts cut into slices of a token budget
    (v15: a request holds its lane while its prompt is computed over several steps), shared
    prefix blocks (v12) and, on a pool too small for every lane's request, preemptions (v08).
    In order, under the block watch: every lane the decode pass ran is found from what it read,
    feeds its request's newest token through its own blocks, and is the lane lane_of() names;
    the tokens are the oracle's."""
    longest = -(-max(len(p) + 8 for p, _, _ in cases()) // BLOCK)  # blocks the longest needs
    # tight: room for the longest request and two blocks a lane, so they preempt each other
    blocks = {"num_blocks": 1 + longest + 2 * lanes} if tight else {}
    engine = impl.build(CKPT, dtype=F64, max_lanes=lanes, block_size=BLOCK, overlap=False,
                        prefix_cache=cache, max_step_tokens=budget, poison_free_blocks=True,
                        **blocks)
    watch = BlockWatch(engine, VOCAB, poisoned=True, slices=True)
    made = [(gap, *cut(cases()[c], n)) for gap, c, n in schedule]
    ids = watch.run([m[:3] for m in made])
    assert [list(engine.output(i).tokens) for i in ids] == [m[3] for m in made]


@pytest.mark.spec(first_with=("LiveKV",))  # a later version takes its lanes from this one
def test_where_no_lane_moves_it_runs_the_previous_versions_ops_one_for_one(impl):
    """What lets the earlier pages skip this version (spec/support/collection/rule.py): requests
    that finish together, or whose freed lane leaves the bucket as it was (3 live requests of 4
    lanes need 4 either way), dispatch the ops of the version before it, in order, with the
    same shapes, and get its tokens; sampled too."""
    source = exports.moves_source(impl)
    before = next(v for v in trees.versions(exports.tree_of(impl)) if v.name == source)
    prompts = [list(p) for p, _ in screened(FIXTURE)]
    seeded = GenerationParams(max_new_tokens=2, seed=3, temperature=0.8)  # ends with the rest

    def trace(version):
        engine = version.build(CKPT, max_lanes=4)
        lanes = []

        def steps():
            ids = [engine.add_request(p, GenerationParams(max_new_tokens=n))
                   for p, n in zip(prompts, (4, 2, 4, 4))]
            ids.append(engine.add_request(prompts[0], seeded))
            while engine.has_unfinished():
                engine.step()
                lanes.append([engine.lane_of(i) for i in ids])
            return [engine.output(i).tokens for i in ids]
        return op_trace(steps), lanes

    (ops, tokens), lanes = trace(impl)
    assert (ops, tokens) == trace(before)[0]
    assert lanes[1][:4] == [0, None, 2, 3] and lanes[2][4] == 1  # a hole, then a newcomer in it
    for k in range(5):  # and no request ever moved
        assert len({step[k] for step in lanes} - {None}) == 1, [step[k] for step in lanes]


def test_constrained_requests_that_move_keep_their_grammars_draws(impl):
    """Structured output (v19) with overlap: a decode launched ahead draws unmasked and the
    constrained rows are drawn again from its logits by lane once the host has read the step.
    Two constrained requests (greedy and seeded) start in lanes 2 and 3 beside two short
    unconstrained ones; they move to lanes 0 and 1 while launches are in flight and still take
    the oracle's draws over the tokens their grammar allows."""
    from spec.test_v19_structured_output import CKPT as QWEN, NEIGHBOUR, PROMPT, golden, grammar
    from spec.test_v19_structured_output import params_for
    engine = impl.build(QWEN, max_lanes=4)
    modes = ("greedy", "seeded")
    ids = [engine.add_request(list(NEIGHBOUR), GenerationParams(max_new_tokens=n)) for n in (1, 2)]
    ids += [engine.add_request(list(PROMPT), params_for(m, grammar("schema"))) for m in modes]
    lanes = []
    while engine.has_unfinished():
        engine.step()
        lanes.append([engine.lane_of(i) for i in ids[2:]])
    assert lanes[0] == [2, 3] and [0, 1] in lanes
    for i, mode in zip(ids[2:], modes):
        gold, _ = golden("schema", mode)
        assert list(engine.output(i).tokens[:len(gold)]) == gold


class Guesses:
    """A proposer that guesses from the oracle's tokens: the first guess right, the others each
    shifted by one (wrong), so every verifying pass keeps a guess and rejects one."""

    def __init__(self, made):
        self.answers = {tuple(p): list(t) for p, _, t in made}

    def propose(self, requests, k):
        out = []
        for r in requests:
            done = len(r.sequence) - len(r.prompt)
            right = self.answers.get(tuple(r.prompt), [])[done:done + k]
            out.append(right[:1] + [(t + 1) % VOCAB for t in right[1:]])
        return out


def moving_with_guesses(impl, acceptance: str, use_graphs: bool, keep: tuple[int, int]):
    """Lanes 0 and 1 hold greedy requests of one and two tokens, lanes 2 and 3 seeded ones that
    guess two tokens a pass; `keep` picks which requests of the four run. Their tokens, lanes
    after the fourth step, and the verifying passes run."""
    all_cases = cases()
    made = [cut(all_cases[0], 1), cut(all_cases[1], 2), all_cases[4], all_cases[5]]
    made = [made[i] for i in keep]
    engine = build(impl, 4, speculative_tokens=2, min_tokens_per_pass=0.0, proposer=Guesses(made),
                   acceptance=acceptance, use_graphs=use_graphs)
    ids = [engine.add_request(p, params) for p, params, _ in made]
    lanes = []
    while engine.has_unfinished():
        engine.step()
        lanes.append([engine.lane_of(i) for i in ids])
    return ([list(engine.output(i).tokens) for i in ids], lanes,
            engine.speculation_stats()["verify_passes"], [t for *_, t in made])


@pytest.mark.parametrize("use_graphs", [True, False], ids=["graphs", "eager"])
def test_moved_requests_verifying_guesses_keep_the_oracles_samples(impl, use_graphs):
    """Speculation on (v17): the seeded requests move into lanes 0 and 1 while their verifying
    passes draw each row with its request's settings, from the verify graph (graphs) or from
    the pass's logits on the host (eager): they keep the oracle's samples."""
    tokens, lanes, passes, golden = moving_with_guesses(impl, "exact", use_graphs, (0, 1, 2, 3))
    assert [lane[2:] for lane in lanes[2:-1]] == [[0, 1]] * (len(lanes) - 3)
    assert passes > 0
    assert tokens == golden


def test_under_rejection_a_moved_request_keeps_the_tokens_it_keeps_alone(impl):
    """Rejection acceptance keeps a guess by the request's own probabilities and seed, not by
    its lane: the seeded requests keep the same tokens whether they start in lanes 2 and 3 and
    move down (greedy ones beside them finishing first) or start alone in lanes 0 and 1."""
    moved, lanes, passes, _ = moving_with_guesses(impl, "rejection", True, (0, 1, 2, 3))
    alone, still, _, _ = moving_with_guesses(impl, "rejection", True, (2, 3))
    assert lanes[0][2:] == [2, 3] and lanes[2][2:] == [0, 1] and still[0] == [0, 1]
    assert passes > 0
    assert moved[2:] == alone


@pytest.mark.gpu
@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "in-order"])
def test_on_cuda_moved_requests_replay_the_smaller_graph_and_draw_the_oracles_samples(impl,
                                                                                     overlap):
    """float32 on CUDA, kernels and graphs on: once lanes 0 and 1 free, the seeded requests of
    lanes 2 and 3 move down, every later decode launches a graph and the 2-lane graph's replays
    count them, and the samples are the oracle's (its cases are stable at float32's error)."""
    from spec.support.watchers.replay_watch import CudaLaunches
    all_cases = cases()
    made = [cut(all_cases[0], 1), cut(all_cases[1], 2), all_cases[4], all_cases[5]]
    engine = impl.build(CKPT, device="cuda", max_lanes=4, overlap=overlap)
    ids = [engine.add_request(p, params) for p, params, _ in made]
    for _ in range(3):
        engine.step()
    assert [engine.lane_of(i) for i in ids[2:]] == [0, 1]
    ran, launched = engine.graph_stats()[2]["replays"], []
    while engine.has_unfinished():
        with CudaLaunches() as seen:
            engine.step()
        launched.append(seen.graphs)
    assert engine.graph_stats()[2]["replays"] - ran >= len(launched) - 1
    assert all(n >= 1 for n in launched[:-1]), launched
    assert [list(engine.output(i).tokens) for i in ids] == [t for *_, t in made]
