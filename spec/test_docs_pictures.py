"""The docs site's pictures: each drawn from a run, and equal to it.

What it introduces: the pictures `torchlet docs build` puts on every version page from v03 on
(torchlet/docs/{scenarios,record,draw,pictures}.py): a scripted scenario run on the version with
the tiny fixture, recorded after every step through the engine contract, and drawn as plain SVG
whose boxes name what they stand for in data- attributes.
Why: a picture drawn by hand drifts from the code; one drawn from a run is true when the run is,
and only a spec that runs the same scenario and reads the picture back shows that the drawing
does not misplace what it was given.
Core principle: the spec drives its own engine through the scenario's script (its own stepper,
not the recorder), reads last_step_stats(), block_tables() and lane_of() at each step k, and
finds exactly those in the SVG's elements for step k. For v09's and v13's kernels view it watches
the same decode step with its own dispatch mode, beside the predecessor's, and finds every op
that launches work in the picture's strips in order, each op that reads layer i's weights in
layer i's strip.
Files: torchlet/docs/{scenarios.py, record.py, draw.py, pictures.py}; spec/mutants/pictures.py
breaks the drawing.
Tradeoff left visible: a picture is as small as its scenario (a handful of requests and steps),
and the spec reads back the views it names (timeline, lanes, pool, kernels), not the layout a
reader sees; the browser spec (spec/test_docs_browser.py) checks that they render. Watching the
kernels runs them under Triton's interpreter, in every step of four engines (their layers choose
at build): seconds, not the tenths the other views take.
"""
from __future__ import annotations

import functools
import re
import xml.etree.ElementTree as ET

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import implementations
from torchlet.docs import pictures, scenarios
from torchlet.docs.record import DECODE, PREFILL, SLICE

# One version per view: v04's arrivals, v05's lanes, v08's preemption, v12's shared blocks.
CHECKED = ("v04", "v05", "v08", "v12")


class Stepper:
    """The scenario's script run on an engine the spec holds, stepping it itself: after each
    step, what the engine says (stats, tables, lanes)."""

    def __init__(self, engine):
        self.engine, self.ids, self.seen = engine, [], {}

    def add(self, prompt, params):
        self.ids.append(self.engine.add_request(list(prompt), params))
        return self.ids[-1]

    def abort(self, rid):
        self.engine.abort(rid)

    def step(self):
        e = self.engine
        lanes_before = {r: e.lane_of(r) for r in self.ids} if hasattr(e, "lane_of") else {}
        e.step()
        stats = e.last_step_stats()
        self.seen[stats.step] = {
            "stats": stats,
            "tables": {r: list(t) for r, t in e.block_tables().items()}
            if hasattr(e, "block_tables") else {},
            "lanes": {r: e.lane_of(r) if e.lane_of(r) is not None else lanes_before.get(r)
                      for r in self.ids} if lanes_before else {}}

    def finish(self, limit=64):
        for _ in range(limit):
            if not self.engine.has_unfinished():
                return
            self.step()


@functools.lru_cache(maxsize=None)
def observed(short: str):
    """(what the spec saw at each step, {view: the picture's SVG root}) for a version."""
    version = implementations.load(short)
    ckpt = scenarios.checkpoint()
    scenario = scenarios.scenario_for(version.name)
    with scenarios.engine_mode(scenario):
        stepper = Stepper(scenarios.build_engine(version, scenario, ckpt))
        scenario.script(stepper)
    with scenarios.on_cpu():
        drawn = {p.view: ET.fromstring(p.svg) for p in pictures.version_pictures(version, ckpt)}
    return stepper.seen, drawn


def boxes(root, **want) -> list[dict]:
    """The attributes of every rect whose data- attributes include `want`."""
    found = []
    for el in root.iter("{http://www.w3.org/2000/svg}rect"):
        data = {k[5:]: v for k, v in el.attrib.items() if k.startswith("data-")}
        if all(data.get(k) == str(v) for k, v in want.items()):
            found.append(data)
    return found


@pytest.mark.parametrize("short", CHECKED)
def test_the_timeline_shows_at_each_step_what_the_engine_says_each_request_did(short):
    seen, drawn = observed(short)
    if "timeline" not in drawn:
        pytest.skip(f"{short}'s scenario draws no timeline")
    for k, step in seen.items():
        stats = step["stats"]
        cells = {int(b["request"]): b["kind"] for b in boxes(drawn["timeline"], step=k)
                 if "request" in b}
        want = {**{r: PREFILL for r in stats.prefill_ids}, **{r: DECODE for r in stats.decode_ids}}
        ran = {r: (DECODE if kind == DECODE else PREFILL) for r, kind in cells.items()
               if kind in (PREFILL, SLICE, DECODE)}
        assert ran == want, f"step {k}: drawn {cells}, the engine ran {want}"
        assert set(stats.waiting_ids) <= set(cells), f"step {k}: a waiting request is not drawn"


@pytest.mark.parametrize("short", ("v08", "v12"))
def test_the_pool_picture_holds_the_block_tables_the_engine_has_at_the_steps_it_draws(short):
    seen, drawn = observed(short)
    steps = {int(b["step"]) for b in boxes(drawn["pool"]) if "index" in b}
    assert steps, "the pool picture draws no table"
    for k in steps:
        entries = [b for b in boxes(drawn["pool"], step=k) if "index" in b]
        tables: dict[int, list] = {}
        for b in sorted(entries, key=lambda b: int(b["index"])):
            tables.setdefault(int(b["request"]), []).append(int(b["block"]))
        assert tables == seen[k]["tables"], f"step {k}"
        held = {int(b["block"]): sorted(map(int, b["holders"].split()))
                for b in boxes(drawn["pool"], step=k, state="used")}
        want: dict[int, list] = {}
        for r, table in sorted(seen[k]["tables"].items()):
            for block in table:
                want.setdefault(block, []).append(r)
        assert held == want, f"step {k}: the pool's blocks and their holders"


def rects(root) -> list:
    return list(root.iter("{http://www.w3.org/2000/svg}rect"))


def test_the_pool_picture_colours_its_requests_apart_from_the_timeline_and_names_each_colour():
    """v08's page sets the pool beside the timeline, where blue is a prefill, green a decode
    and red a preemption: a request of the pool drawn in one of those reads as that, so its
    colours are its own, and its legend names each (a request, the null, free, kept blocks)."""
    _, drawn = observed("v08")
    timeline = {el.get("fill") for el in rects(drawn["timeline"]) if el.get("data-step")}
    pool = rects(drawn["pool"])
    held = {el.get("data-request"): el.get("fill") for el in pool if el.get("data-index")}
    assert held and not set(held.values()) & timeline, (held, timeline)
    legend = {el.get("data-legend"): el.get("fill") for el in pool if el.get("data-legend")}
    assert {f"r{r}": fill for r, fill in held.items()}.items() <= legend.items(), legend
    states = {el.get("data-state"): el.get("fill") for el in pool
              if el.get("data-state") in ("null", "free", "kept")}
    assert states and states.items() <= legend.items(), (states, legend)


def test_the_lanes_picture_puts_each_request_in_the_lane_lane_of_names():
    seen, drawn = observed("v05")
    for k, step in seen.items():
        shown = {int(b["request"]): int(b["lane"]) for b in boxes(drawn["lanes"], step=k)
                 if b.get("request")}
        ran = set(step["stats"].prefill_ids) | set(step["stats"].decode_ids)
        assert shown == {r: step["lanes"][r] for r in ran}, f"step {k}"


def test_v08s_picture_shows_its_preemption_and_v12s_a_block_shared_by_two_tables():
    seen, drawn = observed("v08")
    preempted = [b for b in boxes(drawn["timeline"], kind="preempted")]
    assert preempted, "v08's scenario is drawn without its preemption"
    _, drawn = observed("v12")
    assert any(len(b["holders"].split()) > 1 for b in boxes(drawn["pool"], state="used"))


def test_a_version_whose_run_fails_gets_no_picture_and_the_reason_in_one_line():
    drawn = pictures.all_pictures(["v08_missing"], implementations.REFERENCE_ROOT)
    assert drawn["v08_missing"][0] == []
    reason = drawn["v08_missing"][1]
    assert reason.startswith("UnknownVersionError") and "\n" not in reason


class Dispatched(TorchDispatchMode):
    """What a block dispatched below torch: (op name, its namespace, the checkpoint tensors
    among its arguments) for each op but views and ops that return no tensor (launching no
    kernel: promote_types)."""

    def __init__(self, checkpoint):
        super().__init__()
        self.weights = {(t.data_ptr(), t.numel()): n for n, t in checkpoint.tensors.items()}
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensor_out = any("Tensor" in str(r.type) for r in func._schema.returns)
        if func.namespace != "aten" or (tensor_out and not func.is_view):
            flat = [*args, *(kwargs or {}).values()]
            flat += [t for a in flat if isinstance(a, (list, tuple)) for t in a]
            reads = {self.weights.get((a.data_ptr(), a.numel())) for a in flat
                     if isinstance(a, torch.Tensor)} - {None}
            self.ops.append((func._opname, func.namespace, reads))
        return func(*args, **(kwargs or {}))


class Watcher(Stepper):
    """The Stepper, its `watch`-th step watched."""

    def __init__(self, engine, watch, checkpoint):
        super().__init__(engine)
        self.number, self.watch, self.dispatched = 0, watch, Dispatched(checkpoint)

    def step(self):
        self.number += 1
        if self.number != self.watch:
            return super().step()
        with self.dispatched:
            super().step()


@functools.lru_cache(maxsize=None)
def watched(short: str):
    """({version: the ops its watched step dispatched}, the kernels picture's SVG root) for a
    version and the one its picture sets beside it."""
    version = implementations.load(short)
    ckpt = scenarios.checkpoint()
    scenario = scenarios.scenario_for(version.name)
    here = scenarios.placed(scenario, ckpt)  # on a GPU where there is one: the kernels' device
    seen = {}
    for name in (scenario.against, short):
        v = implementations.load(name)
        with scenarios.engine_mode(scenario):
            watcher = Watcher(scenarios.build_engine(v, scenario, here), scenario.watch, here)
            scenario.script(watcher)
        seen[v.name] = watcher.dispatched.ops
    with scenarios.on_cpu():
        svg = next(p.svg for p in pictures.version_pictures(version, ckpt) if p.view == "kernels")
    return seen, ET.fromstring(svg)


@pytest.mark.parametrize("short", ("v09", "v13"))
def test_the_kernels_picture_shows_each_op_the_watched_step_dispatched_in_order(short):
    """Both versions' strips: one box per op, in the order the step dispatched them, the
    Triton kernels (ops of a kernels module, not aten's) marked as kernels."""
    seen, drawn = watched(short)
    assert len(seen) == 2
    for name, ops in seen.items():
        shown = sorted(boxes(drawn, version=name), key=lambda b: int(b["index"]))
        assert [int(b["index"]) for b in shown] == list(range(len(ops)))
        assert [b["op"] for b in shown] == [op for op, _, _ in ops], name
        assert [b["kind"] == "kernel" for b in shown] == [ns != "aten" for _, ns, _ in ops]
    newer = seen[implementations.load(short).name]
    assert any(ns != "aten" for _, ns, _ in newer), f"{short}'s step launched no Triton kernel"


LAYER_WEIGHT = re.compile(r"model\.layers\.(\d+)\.")


@pytest.mark.parametrize("short", ("v09", "v13"))
def test_each_op_that_reads_a_layers_weights_is_drawn_in_that_layers_strip(short):
    seen, drawn = watched(short)
    for name, ops in seen.items():
        strip = {int(b["index"]): b["segment"] for b in boxes(drawn, version=name)}
        for i, (op, _, reads) in enumerate(ops):
            layers = {int(m.group(1)) for r in reads if (m := LAYER_WEIGHT.match(r))}
            if layers:
                assert strip[i] == f"layer {layers.pop()}", f"{name}: op {i} ({op}) reads {reads}"


def test_v16s_picture_shows_each_rank_holding_its_half_of_the_heads_the_mlp_and_the_vocabulary():
    """v16's shards view, drawn from a run on 2 ranks, against the split the spec expects of the
    fixture's config (4 query heads on 2 KV heads, an even intermediate and vocabulary): rank r
    holds the r-th half of each, and every head is coloured on exactly one rank."""
    version = implementations.load("v16")
    svg = next(p.svg for p in pictures.version_pictures(version, scenarios.checkpoint())
               if p.view == "shards")
    root, config = ET.fromstring(svg), scenarios.checkpoint().config
    for part, size in (("heads", config.num_heads), ("kv_heads", config.num_kv_heads)):
        for rank in (0, 1):
            held = sorted(int(b["index"]) for b in boxes(root, rank=rank, part=part, held=1))
            assert held == list(range(rank * size // 2, (rank + 1) * size // 2)), (part, rank)
    for part, size in (("intermediate", config.intermediate_size), ("vocab", config.vocab_size)):
        for rank in (0, 1):
            (bar,) = boxes(root, rank=rank, part=part, held=1)
            assert (int(bar["start"]), int(bar["stop"])) == (rank * size // 2,
                                                             (rank + 1) * size // 2)
