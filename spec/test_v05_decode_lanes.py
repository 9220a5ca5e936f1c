"""v05_decode_lanes: a fixed set of decode lanes, and every lane in every decode pass.

What it introduces: `max_lanes` (a build option; v04's `max_running` names the same
number). A request takes a decode lane when it is prefilled, the lowest free one, and keeps it
until it finishes or is aborted; a lane freed in a step is free from the next step on.
`engine.lane_of(request_id)` says which lane (None while waiting and once finished) and
`engine.num_lanes` how many there are. The K/V cache is one preallocated tensor per layer,
[lanes, max_len, kv_heads, head_dim]: lane s holds its request's rows. A step is a decode pass
over all the lanes, then a ragged prefill pass for the newcomers (v04 ran one mixed pass). In the
decode pass lane s carries its own request; an idle lane carries dummy inputs, and its K/V
write lands where nobody reads.
Why v04 needs it: v04's decode inputs are shaped by whoever runs this step: the batch size changes
at every step, and a request's row moves with its place in the batch. Graph replay (v07) needs
fixed shapes and fixed places. Lanes give both: a request's lane and its cache rows never move.
Core principle: a lane is a request's address for its whole life. Checked at every step under
random arrival schedules: a running request's lane never changes; no two running requests share
one; a newcomer takes the lowest lane free when the step began, so freed lanes are reused; idle
lanes are isolated: filling them with garbage (build(..., poison_inactive_lanes=True)) changes no
active request's tokens or logits; and batching stays invisible: each request's tokens equal its
solo run. lane_of() is never the only evidence: at every step the passes themselves are watched
(spec/support/watchers/lanes.py) at the embedding lookup, at the K/V stores and in the cache contents.
The lane lane_of(r) names feeds r's newest token; r's K/V rows stay where its prefill stored them
while it lives (nothing else writes them, each new row extends them, they hold what cached_kv(r)
reports); and with fixed lanes (v05-v07) a lane is one place in the cache: a newcomer in a freed
lane stores from the row its predecessor did. From v07 the replayed graph's ops are watched; from
v08 a request's place is its blocks (its rows run on within a block); v10's Triton store is seen
as its custom op, in the float32 scenario.
Files: implementations/v05_decode_lanes/{kv.py, request.py, inputs.py, runner.py, model.py}
against implementations/v02_kv_cache/{kv.py, model.py} and
implementations/v03_request_states/{request.py, runner.py} (the scheduler and its policy are
v04's, the loop v03's, unchanged).
Tradeoff left visible: waste, twice. Every decode pass computes all num_lanes lanes,
however few requests run: measured by the token meter, one request among 4 lanes costs 4 rows in
every layer. And every lane reserves max_len = max_position rows of K and V in every layer at
build, whatever its request uses: with the tiny model's 256-position context, a request of 5
tokens leaves 251 of its lane's 256 rows (98%) idle. Paging (v08) gives memory out by the block.
"""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import implementations
from spec.support.inputs import strategies as sts
from spec.support.watchers.allocations import OpLog
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.watchers.kernel_calls import AtenCalls
from spec.support.watchers.lanes import LaneTracker
from spec.support.watchers.meter import TokenMeter
from spec.support.models.fixtures import tiny_checkpoint
from torchlet.contract import (DECODE_LANES, GRAPH_REPLAY, PAGED_KV, GenerationParams,
                               RequestState)

pytestmark = pytest.mark.spec(needs=DECODE_LANES)

CKPT = tiny_checkpoint("tiny_qwen2")
CFG = CKPT.config
VOCAB = CFG.vocab_size
MAX_LEN = 8
PROMPT = [17, 5, 300, 42, 99, 8, 250]


@pytest.fixture(scope="module")
def solo():
    """Each prompt's tokens alone, from v03 (a batch of one)."""
    v03 = implementations.load("v03_request_states").build(CKPT, dtype=torch.float64)
    return lambda prompt, params: v03.generate([prompt], params)[0]


def lane_tracker(engine, impl) -> LaneTracker:
    """Watches what each step's passes feed and store (spec/support/watchers/lanes.py). Paged versions
    keep a request's K/V in blocks, so its rows run on only within a block."""
    block = engine.pool_stats()["block_size"] if PAGED_KV in impl.capabilities else None
    return LaneTracker(engine, CFG, block)


class LaneWatch:
    """Drives an arrival schedule and checks the lanes after every step: through the public API,
    and against what the decode pass really fed and stored (LaneTracker); with a token meter,
    also the rows of every pass."""

    def __init__(self, engine, impl, observe: bool = True):
        self.engine, self.impl = engine, impl
        self.lanes = lane_tracker(engine, impl) if observe else None
        self.ids: list[int] = []
        self.held: dict[int, int] = {}   # running request -> lane, as of the last step

    def run(self, schedule, meter: TokenMeter | None = None) -> list[int]:
        prompt_of = {}
        for gap, prompt, params in schedule:
            for _ in range(gap):
                self.step(meter, prompt_of)
            request_id = self.engine.add_request(prompt, params)
            prompt_of[request_id] = prompt
            self.ids.append(request_id)
            assert self.engine.lane_of(request_id) is None, "a waiting request holds a lane"
        while self.engine.has_unfinished():
            self.step(meter, prompt_of)
        return self.ids

    def step(self, meter, prompt_of):
        passes_before = len(meter.passes()) if meter else 0
        if not (self.lanes.step(self.ids) if self.lanes else self.engine.step()):
            return
        stats = self.engine.last_step_stats()
        n = self.engine.num_lanes
        held = {}
        for i in self.ids:
            lane = self.engine.lane_of(i)
            if self.engine.output(i).state is RequestState.RUNNING:
                assert isinstance(lane, int) and 0 <= lane < n, f"request {i} runs in lane {lane}"
                held[i] = lane
            else:
                assert lane is None, f"request {i} is not running but holds lane {lane}"
        assert len(set(held.values())) == len(held), f"running requests share a lane: {held}"
        for i in held.keys() & self.held.keys():
            assert held[i] == self.held[i], f"request {i} moved: lane {self.held[i]} -> {held[i]}"
        free = sorted(set(range(n)) - set(self.held.values()))  # as the step began
        for i, lowest in zip(stats.prefill_ids, free):
            if i in held:  # a request done at its first token has given its lane back already
                assert held[i] == lowest, f"newcomer {i} took lane {held[i]}, not {lowest}"
        if meter:
            prefill_rows = sum(len(prompt_of[i]) for i in stats.prefill_ids)
            in_use = max(self.held.values(), default=0) + 1
            self.check_passes(meter.passes()[passes_before:], stats, prefill_rows, in_use)
        self.held = held

    def check_passes(self, passes, stats, prefill_rows, in_use):
        """A step is a decode pass over the lanes (when anyone decodes) and a ragged prefill pass
        of the newcomers' prompts (when anyone joins), in either order."""
        for p in passes:
            assert len(set(p)) == 1, f"layers of one pass were fed different rows: {p}"
        rows = [p[0] for p in passes]
        if stats.prefill_ids:
            assert prefill_rows in rows, f"no pass fed the newcomers' {prefill_rows} rows: {rows}"
            rows.remove(prefill_rows)
        assert len(rows) == (1 if stats.decode_ids else 0), f"passes left over: {rows}"
        if stats.decode_ids:
            assert_decode_lanes(self.impl, rows[0], self.engine.num_lanes, in_use)


def assert_decode_lanes(impl, fed: int, lanes: int, in_use: int):
    # v05 and v06 run every lane; with graph replay (v07 on), a pass runs the smallest captured
    # batch that covers the highest lane in use, never more than all the lanes.
    if GRAPH_REPLAY in impl.capabilities:
        assert in_use <= fed <= lanes, f"{fed} rows for lanes 0..{in_use - 1} of {lanes}"
    else:
        assert fed == lanes, f"a decode pass fed {fed} rows, not one per lane ({lanes})"


# --- under random arrival schedules -------------------------------------------------------------

@pytest.mark.spec(engine_parts=True, one_step_per_call=True)
@given(schedule=sts.arrival_schedules(VOCAB, max_len=MAX_LEN), lanes=st.integers(1, 4))
@engine_settings()
def test_for_any_arrival_schedule_a_request_keeps_one_unshared_lane_newcomers_taking_the_lowest(
        impl, solo, schedule, lanes):
    engine = impl.build(CKPT, dtype=torch.float64, max_lanes=lanes)
    assert engine.num_lanes == lanes
    watch = LaneWatch(engine, impl)
    with TokenMeter(CKPT) as meter:
        ids = watch.run(schedule, meter)
    for i, (_, prompt, params) in zip(ids, schedule):
        assert engine.output(i).tokens == solo(prompt, params)
        assert engine.lane_of(i) is None, "a finished request still holds a lane"


@pytest.mark.spec(engine_parts=True)
@given(schedule=sts.arrival_schedules(VOCAB, max_len=MAX_LEN), lanes=st.integers(2, 4))
@engine_settings()
def test_garbage_in_the_idle_lanes_changes_no_requests_tokens(impl, schedule, lanes):
    outputs = []
    for poison in (False, True):
        engine = impl.build(CKPT, dtype=torch.float64, max_lanes=lanes,
                            poison_inactive_lanes=poison)
        # garbage stored into a live request's rows would show in its tokens, so only the
        # property above pays for watching the passes
        ids = LaneWatch(engine, impl, observe=False).run(schedule)
        outputs.append([engine.output(i) for i in ids])
    assert outputs[0] == outputs[1]


# --- one step at a time ---------------------------------------------------------------------

def states(engine, ids):
    return [(engine.output(i).state.name[0], engine.lane_of(i)) for i in ids]


def test_the_contract_shows_no_lane_while_waiting_a_lane_while_running_and_none_once_finished(impl):
    engine = impl.build(CKPT, max_lanes=1)
    a = engine.add_request(PROMPT, GenerationParams(max_new_tokens=2))
    b = engine.add_request([9, 8, 7], GenerationParams(max_new_tokens=3))
    seen = [states(engine, [a, b])]
    while engine.has_unfinished():
        engine.step()
        seen.append(states(engine, [a, b]))
    assert seen == [[("W", None), ("W", None)],
                    [("R", 0), ("W", None)],   # a prefilled into lane 0; b waits: no lane free
                    [("F", None), ("W", None)],  # a finishes; its lane is free from the next step
                    [("F", None), ("R", 0)],
                    [("F", None), ("R", 0)],
                    [("F", None), ("F", None)]]


def test_a_freed_lane_goes_to_the_next_request_lowest_lane_first(impl):
    engine = impl.build(CKPT, max_lanes=3)
    long, short, other = (engine.add_request(p, GenerationParams(max_new_tokens=n))
                          for p, n in ((PROMPT, 8), ([9, 8, 7], 2), ([4, 4, 4, 4], 8)))
    late1 = engine.add_request([11, 12], GenerationParams(max_new_tokens=8))
    late2 = engine.add_request([13, 14, 15], GenerationParams(max_new_tokens=8))
    engine.step()
    assert [engine.lane_of(i) for i in (long, short, other)] == [0, 1, 2]
    engine.step()  # short finishes: lane 1 is free from the next step
    assert engine.lane_of(short) is None and engine.lane_of(late1) is None
    engine.step()
    assert engine.lane_of(late1) == 1
    engine.abort(other)  # an abort frees the lane at once: 2, then 0
    engine.abort(long)
    assert engine.lane_of(other) is None and engine.lane_of(long) is None
    engine.step()
    assert [engine.lane_of(i) for i in (late2, late1)] == [0, 1]  # the lowest, not the first freed


@pytest.mark.spec(one_step_per_call=True)
def test_the_lane_that_lane_of_names_feeds_its_requests_token_and_its_kv_rows_stay_put(impl):
    """lane_of() checked against the passes themselves, while requests leave from below others
    (a finish, then an abort) and newcomers fill the freed lanes. In float32, so v09 and v10 run
    their Triton kernels (v10's store is seen as its custom op); v07 on replays the decode pass
    from its graph, whose recorded ops still dispatch."""
    engine = impl.build(CKPT, max_lanes=4)
    lanes = lane_tracker(engine, impl)
    ids = [engine.add_request(p, GenerationParams(max_new_tokens=n))
           for p, n in ((PROMPT, 2), ([9, 8, 7], 6), ([4, 4, 4, 4], 6))]
    a, b, c = ids
    lanes.step(ids)
    lanes.step(ids)  # a finishes below b and c: they must stay in lanes 1 and 2
    ids.append(d := engine.add_request([11, 12], GenerationParams(max_new_tokens=4)))
    lanes.step(ids)
    assert [engine.lane_of(i) for i in (a, b, c, d)] == [None, 1, 2, 0]
    lanes.step(ids)
    engine.abort(b)
    ids.append(e := engine.add_request([13, 14, 15], GenerationParams(max_new_tokens=3)))
    lanes.step(ids)
    assert [engine.lane_of(i) for i in (c, d, e)] == [2, 0, 1]
    while engine.has_unfinished():
        lanes.step(ids)
    assert [len(engine.output(i).tokens) for i in ids] == [2, 4, 6, 4, 3]


def test_a_decode_pass_feeds_every_lane_however_few_requests_run(impl):
    engine = impl.build(CKPT, max_lanes=4)
    engine.add_request(PROMPT, GenerationParams(max_new_tokens=3))
    engine.step()
    with TokenMeter(CKPT) as meter:
        engine.step()
    (rows,) = meter.passes()
    assert len(set(rows)) == 1
    assert_decode_lanes(impl, rows[0], lanes=4, in_use=1)  # v05: 4 rows per layer, 3 idle


def test_a_pass_computes_the_rotations_cos_and_sin_once_for_all_its_layers(impl):
    """Every layer turns q and k by the same positions: one cos and one sin per pass, where v02
    computes both in each layer, for q and again for k. Seen as the aten ops the step dispatches
    (a replayed CPU graph dispatches its recorded ops again)."""
    assert CFG.num_layers > 1, "one layer could not tell once per pass from once per layer"
    engine = impl.build(CKPT, max_lanes=2)
    engine.add_request(PROMPT, GenerationParams(max_new_tokens=4))
    engine.add_request(PROMPT[:3], GenerationParams(max_new_tokens=4))
    engine.step()  # both prefills: one pass
    with AtenCalls() as calls:
        engine.step()  # one decode pass over both lanes
    assert (calls.counts["cos"], calls.counts["sin"]) == (1, 1), dict(calls.counts)


def test_idle_lanes_carry_garbage_when_poisoned_yet_the_active_logits_are_unchanged(impl):
    """Driven through the kv_cache API: lanes 1 and 3 idle among 4 while a and c decode."""
    prompts = {"a": PROMPT, "b": [9, 8, 7], "c": [4, 4, 4, 4, 4]}
    clean, dirty = (impl.build(CKPT, dtype=torch.float64, max_lanes=4,
                               poison_inactive_lanes=p) for p in (False, True))
    first = [engine.prefill(list(prompts), list(prompts.values())) for engine in (clean, dirty)]
    torch.testing.assert_close(first[1], first[0])
    for engine in (clean, dirty):
        engine.release("b")
    seqs = {r: prompts[r] + [int(first[0][k].argmax())] for k, r in enumerate(prompts) if r != "b"}
    fed = []
    for _ in range(3):
        logits = []
        for engine in (clean, dirty):
            with OpLog((VOCAB, CFG.hidden_size)) as log:
                logits.append(engine.decode(list(seqs), list(seqs.values())))
            fed.append(log.lookups[-1].ids)  # the pass that made the logits
        torch.testing.assert_close(logits[1], logits[0])
        for k, r in enumerate(seqs):
            seqs[r] = seqs[r] + [int(logits[0][k].argmax())]
    clean_ids, dirty_ids = torch.stack(fed[0::2]), torch.stack(fed[1::2])
    assert not torch.equal(clean_ids, dirty_ids), "poison_inactive_lanes fed no garbage"


@pytest.mark.spec(until=PAGED_KV)  # from v08 the K/V memory is a pool of blocks: spec/test_v08_*
def test_each_lane_reserves_max_len_rows_of_kv_at_build_whatever_its_request_uses(impl):
    allocated = {}
    for lanes in (2, 4):
        with OpLog() as log:
            engine = impl.build(CKPT, dtype=torch.float64, max_lanes=lanes)
        allocated[lanes] = sum(math.prod(shape) * dtype.itemsize
                               for op in log.ops for shape, dtype in op.fresh)
    row = 2 * CFG.num_layers * CFG.num_kv_heads * CFG.head_dim * torch.float64.itemsize  # K and V
    per_lane = (allocated[4] - allocated[2]) / 2
    # K/V rows for a whole context per lane, held from build on (a little more: per-lane inputs)
    assert CFG.max_position * row <= per_lane <= 1.05 * CFG.max_position * row
