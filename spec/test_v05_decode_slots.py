"""v05_decode_slots: a fixed set of decode slots, and one lane per slot in every decode pass.

What it introduces: `max_decode_slots` (a build option; v04's `max_running` names the same
number). A request takes a decode slot when it is prefilled, the lowest free one, and keeps it
until it finishes or is aborted; a slot freed in a step is free from the next step on.
`engine.slot_of(request_id)` says which slot (None while waiting and once finished) and
`engine.num_decode_slots` how many there are. The K/V cache is one preallocated tensor per layer,
[slots, max_len, kv_heads, head_dim]: slot s holds its request's rows. A step is a decode pass
over all the slots, then a ragged prefill pass for the newcomers (v04 ran one mixed pass). In the
decode pass lane s carries the request in slot s; an idle lane carries dummy inputs, and its K/V
write lands where nobody reads.
Why v04 needs it: v04's decode inputs are shaped by whoever runs this step: the batch size changes
at every step, and a request's row moves with its place in the batch. Graph replay (v07) needs
fixed shapes and fixed places. Slots give both: a request's lane and its cache rows never move.
Core principle: a slot is a request's address for its whole life. Checked at every step under
random arrival schedules: a running request's slot never changes; no two running requests share
one; a newcomer takes the lowest slot free when the step began, so freed slots are reused; idle
lanes are isolated: filling them with garbage (build(..., poison_inactive_lanes=True)) changes no
active request's tokens or logits; and batching stays invisible: each request's tokens equal its
solo run. slot_of() is never the only evidence: at every step the passes themselves are watched
(spec/support/lanes.py) at the embedding lookup, at the K/V stores and in the cache contents.
The lane slot_of(r) names feeds r's newest token; r's K/V rows stay where its prefill stored them
while it lives (nothing else writes them, each new row extends them, they hold what cached_kv(r)
reports); and with fixed slots (v05-v07) a slot is one place in the cache: a newcomer in a freed
slot stores from the row its predecessor did. From v07 the replayed graph's ops are watched; from
v08 a request's place is its blocks (its rows run on within a block); v10's Triton store is seen
as its custom op, in the float32 scenario.
Files: implementations/v05_decode_slots/{kv.py, request.py, inputs.py, runner.py, model.py}
against implementations/v02_kv_cache/{cache.py, model.py} and
implementations/v03_request_states/{request.py, runner.py} (the scheduler and its policy are
v04's, the loop v03's, unchanged).
Tradeoff left visible: waste, twice. Every decode pass computes all num_decode_slots lanes,
however few requests run: measured by the token meter, one request among 4 slots costs 4 rows in
every layer. And every slot reserves max_len = max_position rows of K and V in every layer at
build, whatever its request uses: with the tiny model's 256-position context, a request of 5
tokens leaves 251 of its slot's 256 rows (98%) idle. Paging (v08) gives memory out by the block.
"""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import implementations
from spec.support import strategies as sts
from spec.support.allocations import OpLog
from spec.support.hypothesis_profiles import engine_settings
from spec.support.kernel_calls import AtenCalls
from spec.support.lanes import LaneTracker
from spec.support.meter import TokenMeter
from spec.support.models import tiny_checkpoint
from torchlet.contract import (DECODE_SLOTS, GRAPH_REPLAY, PAGED_KV, GenerationParams,
                               RequestState)

pytestmark = pytest.mark.needs(DECODE_SLOTS)

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
    """Watches what each step's passes feed and store (spec/support/lanes.py). Paged versions
    keep a request's K/V in blocks, so its rows run on only within a block."""
    block = engine.pool_stats()["block_size"] if PAGED_KV in impl.capabilities else None
    return LaneTracker(engine, CFG, block)


class SlotWatch:
    """Drives an arrival schedule and checks the slots after every step: through the public API,
    and against what the decode pass really fed and stored (LaneTracker); with a token meter,
    also the rows of every pass."""

    def __init__(self, engine, impl, observe: bool = True):
        self.engine, self.impl = engine, impl
        self.lanes = lane_tracker(engine, impl) if observe else None
        self.ids: list[int] = []
        self.held: dict[int, int] = {}   # running request -> slot, as of the last step

    def run(self, schedule, meter: TokenMeter | None = None) -> list[int]:
        prompt_of = {}
        for gap, prompt, params in schedule:
            for _ in range(gap):
                self.step(meter, prompt_of)
            request_id = self.engine.add_request(prompt, params)
            prompt_of[request_id] = prompt
            self.ids.append(request_id)
            assert self.engine.slot_of(request_id) is None, "a waiting request holds a slot"
        while self.engine.has_unfinished():
            self.step(meter, prompt_of)
        return self.ids

    def step(self, meter, prompt_of):
        passes_before = len(meter.passes()) if meter else 0
        if not (self.lanes.step(self.ids) if self.lanes else self.engine.step()):
            return
        stats = self.engine.last_step_stats()
        n = self.engine.num_decode_slots
        held = {}
        for i in self.ids:
            slot = self.engine.slot_of(i)
            if self.engine.output(i).state is RequestState.RUNNING:
                assert isinstance(slot, int) and 0 <= slot < n, f"request {i} runs in slot {slot}"
                held[i] = slot
            else:
                assert slot is None, f"request {i} is not running but holds slot {slot}"
        assert len(set(held.values())) == len(held), f"running requests share a slot: {held}"
        for i in held.keys() & self.held.keys():
            assert held[i] == self.held[i], f"request {i} moved: slot {self.held[i]} -> {held[i]}"
        free = sorted(set(range(n)) - set(self.held.values()))  # as the step began
        for i, lowest in zip(stats.prefill_ids, free):
            if i in held:  # a request done at its first token has given its slot back already
                assert held[i] == lowest, f"newcomer {i} took slot {held[i]}, not {lowest}"
        if meter:
            prefill_rows = sum(len(prompt_of[i]) for i in stats.prefill_ids)
            in_use = max(self.held.values(), default=0) + 1
            self.check_passes(meter.passes()[passes_before:], stats, prefill_rows, in_use)
        self.held = held

    def check_passes(self, passes, stats, prefill_rows, in_use):
        """A step is a decode pass over the slots (when anyone decodes) and a ragged prefill pass
        of the newcomers' prompts (when anyone joins), in either order."""
        for p in passes:
            assert len(set(p)) == 1, f"layers of one pass were fed different rows: {p}"
        rows = [p[0] for p in passes]
        if stats.prefill_ids:
            assert prefill_rows in rows, f"no pass fed the newcomers' {prefill_rows} rows: {rows}"
            rows.remove(prefill_rows)
        assert len(rows) == (1 if stats.decode_ids else 0), f"passes left over: {rows}"
        if stats.decode_ids:
            assert_decode_lanes(self.impl, rows[0], self.engine.num_decode_slots, in_use)


def assert_decode_lanes(impl, lanes: int, slots: int, in_use: int):
    # v05 and v06 run every lane; with graph replay (v07 on), a pass runs the smallest captured
    # batch that covers the highest slot in use, never more than all the slots.
    if GRAPH_REPLAY in impl.capabilities:
        assert in_use <= lanes <= slots, f"{lanes} lanes for slots 0..{in_use - 1} of {slots}"
    else:
        assert lanes == slots, f"a decode pass fed {lanes} rows, not one per slot ({slots})"


# --- under random arrival schedules -------------------------------------------------------------

@pytest.mark.engine_parts
@pytest.mark.one_step_per_call
@given(schedule=sts.arrival_schedules(VOCAB, max_len=MAX_LEN), slots=st.integers(1, 4))
@engine_settings()
def test_for_any_arrival_schedule_a_request_keeps_one_unshared_slot_newcomers_taking_the_lowest(
        impl, solo, schedule, slots):
    engine = impl.build(CKPT, dtype=torch.float64, max_decode_slots=slots)
    assert engine.num_decode_slots == slots
    watch = SlotWatch(engine, impl)
    with TokenMeter(CKPT) as meter:
        ids = watch.run(schedule, meter)
    for i, (_, prompt, params) in zip(ids, schedule):
        assert engine.output(i).tokens == solo(prompt, params)
        assert engine.slot_of(i) is None, "a finished request still holds a slot"


@pytest.mark.engine_parts
@given(schedule=sts.arrival_schedules(VOCAB, max_len=MAX_LEN), slots=st.integers(2, 4))
@engine_settings()
def test_garbage_in_the_idle_lanes_changes_no_requests_tokens(impl, schedule, slots):
    outputs = []
    for poison in (False, True):
        engine = impl.build(CKPT, dtype=torch.float64, max_decode_slots=slots,
                            poison_inactive_lanes=poison)
        # garbage stored into a live request's rows would show in its tokens, so only the
        # property above pays for watching the passes
        ids = SlotWatch(engine, impl, observe=False).run(schedule)
        outputs.append([engine.output(i) for i in ids])
    assert outputs[0] == outputs[1]


# --- one step at a time ---------------------------------------------------------------------

def states(engine, ids):
    return [(engine.output(i).state.name[0], engine.slot_of(i)) for i in ids]


def test_the_contract_shows_no_slot_while_waiting_a_slot_while_running_and_none_once_finished(impl):
    engine = impl.build(CKPT, max_decode_slots=1)
    a = engine.add_request(PROMPT, GenerationParams(max_new_tokens=2))
    b = engine.add_request([9, 8, 7], GenerationParams(max_new_tokens=3))
    seen = [states(engine, [a, b])]
    while engine.has_unfinished():
        engine.step()
        seen.append(states(engine, [a, b]))
    assert seen == [[("W", None), ("W", None)],
                    [("R", 0), ("W", None)],   # a prefilled into slot 0; b waits: no slot free
                    [("F", None), ("W", None)],  # a finishes; its slot is free from the next step
                    [("F", None), ("R", 0)],
                    [("F", None), ("R", 0)],
                    [("F", None), ("F", None)]]


def test_a_freed_slot_goes_to_the_next_request_lowest_slot_first(impl):
    engine = impl.build(CKPT, max_decode_slots=3)
    long, short, other = (engine.add_request(p, GenerationParams(max_new_tokens=n))
                          for p, n in ((PROMPT, 8), ([9, 8, 7], 2), ([4, 4, 4, 4], 8)))
    late1 = engine.add_request([11, 12], GenerationParams(max_new_tokens=8))
    late2 = engine.add_request([13, 14, 15], GenerationParams(max_new_tokens=8))
    engine.step()
    assert [engine.slot_of(i) for i in (long, short, other)] == [0, 1, 2]
    engine.step()  # short finishes: slot 1 is free from the next step
    assert engine.slot_of(short) is None and engine.slot_of(late1) is None
    engine.step()
    assert engine.slot_of(late1) == 1
    engine.abort(other)  # an abort frees the slot at once: 2, then 0
    engine.abort(long)
    assert engine.slot_of(other) is None and engine.slot_of(long) is None
    engine.step()
    assert [engine.slot_of(i) for i in (late2, late1)] == [0, 1]  # the lowest, not the first freed


@pytest.mark.one_step_per_call
def test_the_lane_slot_of_names_feeds_its_requests_token_and_its_kv_rows_stay_put(impl):
    """slot_of() checked against the passes themselves, while requests leave from below others
    (a finish, then an abort) and newcomers fill the freed slots. In float32, so v09 and v10 run
    their Triton kernels (v10's store is seen as its custom op); v07 on replays the decode pass
    from its graph, whose recorded ops still dispatch."""
    engine = impl.build(CKPT, max_decode_slots=4)
    lanes = lane_tracker(engine, impl)
    ids = [engine.add_request(p, GenerationParams(max_new_tokens=n))
           for p, n in ((PROMPT, 2), ([9, 8, 7], 6), ([4, 4, 4, 4], 6))]
    a, b, c = ids
    lanes.step(ids)
    lanes.step(ids)  # a finishes below b and c: they must stay in lanes 1 and 2
    ids.append(d := engine.add_request([11, 12], GenerationParams(max_new_tokens=4)))
    lanes.step(ids)
    assert [engine.slot_of(i) for i in (a, b, c, d)] == [None, 1, 2, 0]
    lanes.step(ids)
    engine.abort(b)
    ids.append(e := engine.add_request([13, 14, 15], GenerationParams(max_new_tokens=3)))
    lanes.step(ids)
    assert [engine.slot_of(i) for i in (c, d, e)] == [2, 0, 1]
    while engine.has_unfinished():
        lanes.step(ids)
    assert [len(engine.output(i).tokens) for i in ids] == [2, 4, 6, 4, 3]


def test_a_decode_pass_feeds_every_slot_however_few_requests_run(impl):
    engine = impl.build(CKPT, max_decode_slots=4)
    engine.add_request(PROMPT, GenerationParams(max_new_tokens=3))
    engine.step()
    with TokenMeter(CKPT) as meter:
        engine.step()
    (rows,) = meter.passes()
    assert len(set(rows)) == 1
    assert_decode_lanes(impl, rows[0], slots=4, in_use=1)  # v05: 4 rows per layer, 3 idle


def test_a_pass_computes_the_rotations_cos_and_sin_once_for_all_its_layers(impl):
    """Every layer turns q and k by the same positions: one cos and one sin per pass, where v02
    computes both in each layer, for q and again for k. Seen as the aten ops the step dispatches
    (a replayed CPU graph dispatches its recorded ops again)."""
    assert CFG.num_layers > 1, "one layer could not tell once per pass from once per layer"
    engine = impl.build(CKPT, max_decode_slots=2)
    engine.add_request(PROMPT, GenerationParams(max_new_tokens=4))
    engine.add_request(PROMPT[:3], GenerationParams(max_new_tokens=4))
    engine.step()  # both prefills: one pass
    with AtenCalls() as calls:
        engine.step()  # one decode pass over both lanes
    assert (calls.counts["cos"], calls.counts["sin"]) == (1, 1), dict(calls.counts)


def test_idle_lanes_carry_garbage_when_poisoned_yet_the_active_logits_are_unchanged(impl):
    """Driven through the kv_cache API: slots 1 and 3 idle among 4 while a and c decode."""
    prompts = {"a": PROMPT, "b": [9, 8, 7], "c": [4, 4, 4, 4, 4]}
    clean, dirty = (impl.build(CKPT, dtype=torch.float64, max_decode_slots=4,
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


def test_each_slot_reserves_max_len_rows_of_kv_at_build_whatever_its_request_uses(impl):
    if PAGED_KV in impl.capabilities:
        pytest.skip("from v08 the K/V memory is a pool of blocks: see test_v08_*")
    allocated = {}
    for slots in (2, 4):
        with OpLog() as log:
            engine = impl.build(CKPT, dtype=torch.float64, max_decode_slots=slots)
        allocated[slots] = sum(math.prod(shape) * dtype.itemsize
                               for op in log.ops for shape, dtype in op.fresh)
    row = 2 * CFG.num_layers * CFG.num_kv_heads * CFG.head_dim * torch.float64.itemsize  # K and V
    per_slot = (allocated[4] - allocated[2]) / 2
    # K/V rows for a whole context per slot, held from build on (a little more: per-lane inputs)
    assert CFG.max_position * row <= per_slot <= 1.05 * CFG.max_position * row
