"""A scenario run recorded from outside, the way the specs observe an engine.

After every step() the recorder reads only the engine contract: last_step_stats() (who was
prefilled, decoded, left waiting or finished), num_cached_tokens() before and after the step (the
rows a request's cache grew by: its share of the step's rows, which the stats give only as a
total), output() (the tokens taken), and where the version has them lane_of(), block_tables(),
pool_stats(), num_preemptions, prefix_cache_stats(), graph_stats() and decode_buffers(). No
private attribute is read, so a picture drawn from a Run shows what the engine did, not what a
field of it says. One chosen step may also be watched from below torch's dispatcher (OpWatch):
every op it dispatched that launches work, Triton kernels included, and which checkpoint
weights each read, which is how its ops are told apart by layer."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from torchlet.running import triton_interpret

# What a request did in one step, as the pictures colour it.
PREFILL, SLICE, DECODE, WAITING, PREEMPTED, IDLE = (
    "prefill", "slice", "decode", "waiting", "preempted", "idle")


@dataclass
class Cell:
    """One request in one step."""
    kind: str                       # PREFILL, SLICE, DECODE, WAITING, PREEMPTED or IDLE
    rows: int | None = None         # how much its cache grew in the step (None: not known)
    cached: int = 0                 # tokens its cache holds after the step
    tokens: tuple[int, ...] = ()    # tokens taken in this step
    lane: int | None = None
    table: tuple[int, ...] = ()     # its block table after the step
    hit: int = 0                    # prompt tokens found cached (v12) in this step
    finished: str = ""              # the finish reason, in the step it finished


# What an op of a watched step does, as the kernels picture colours it.
GEMM, KERNEL, MATHS, MEMORY = "gemm", "kernel", "maths", "memory"
GEMMS = {"linear", "matmul", "mm", "addmm", "bmm", "baddbmm", "einsum"}
MOVES = {"copy_", "zero_", "fill_", "index", "index_put_", "index_select", "cat", "stack",
         "arange", "clone", "zeros", "zeros_like", "empty", "empty_like", "full", "new_zeros",
         "scatter_", "gather", "_to_copy", "lift_fresh_copy", "where"}
BEFORE, AFTER = "before the layers", "after the layers"
LAYER = re.compile(r"^model\.layers\.(\d+)\.")


@dataclass(frozen=True)
class Op:
    """One op a watched step dispatched, in order."""
    name: str                   # "linear", "rms_norm"
    kernel: str                 # a Triton kernel's op namespace (its kernels module); "": torch's
    kind: str                   # GEMM, KERNEL, MATHS or MEMORY
    reads: tuple[str, ...]      # the checkpoint tensors among its arguments
    segment: str = ""           # BEFORE, "layer 0", ..., AFTER (segments())


def launches_nothing(func) -> bool:
    """A view (every result an alias of an input, none written) or an op that returns no tensor
    (promote_types): torch ops that launch no kernel. A kernel's own op always counts."""
    if func.namespace != "aten":
        return False
    returns = func._schema.returns
    tensors = [r for r in returns if "Tensor" in str(r.type)]
    return not tensors or all(r.alias_info is not None and not r.alias_info.is_write
                              for r in tensors)


class OpWatch(TorchDispatchMode):
    """Every op below torch's dispatcher that launches work, in order: aten ops and the Triton
    kernels, which the versions wrap as torch.library custom ops (one op a launch). `names`:
    (data_ptr, numel) of each checkpoint tensor -> its name, to say which weights an op reads."""

    def __init__(self, names: dict[tuple[int, int], str]):
        super().__init__()
        self.names, self.ops = names, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not launches_nothing(func):
            reads = sorted({self.names[k] for k in (
                (a.data_ptr(), a.numel()) for a in tree_leaves((args, kwargs or {}))
                if isinstance(a, torch.Tensor)) if k in self.names})
            kernel = "" if func.namespace == "aten" else func.namespace
            name = func._opname
            kind = KERNEL if kernel else GEMM if name in GEMMS else MEMORY if name in MOVES \
                else MATHS
            self.ops.append(Op(name, kernel, kind, tuple(reads)))
        return func(*args, **(kwargs or {}))


def segments(ops: list[Op]) -> list[Op]:
    """Each op with its segment: an op that reads a layer's weights is that layer's, one that
    reads the embedding or the final norm's is before or after the layers, and one that reads
    no weight goes with the next op that does (after the layers where none does); segments only
    move forward, so the tied embedding read again as the LM head is after the layers."""
    order = [BEFORE]
    anchors = []
    for op in ops:
        layers = {int(m.group(1)) for r in op.reads if (m := LAYER.match(r))}
        if layers:
            anchors.append(f"layer {min(layers)}")
        elif op.reads:
            anchors.append(BEFORE if any("embed" in r for r in op.reads) else AFTER)
        else:
            anchors.append(None)
        if anchors[-1] not in (None, AFTER, *order):
            order.append(anchors[-1])
    order.append(AFTER)
    rank = {name: i for i, name in enumerate(order)}
    seg, nxt = [0] * len(ops), rank[AFTER]
    for i in range(len(ops) - 1, -1, -1):
        nxt = rank[anchors[i]] if anchors[i] is not None else nxt
        seg[i] = nxt
    for i in range(1, len(ops)):
        seg[i] = max(seg[i], seg[i - 1])
    return [replace(op, segment=order[seg[i]]) for i, op in enumerate(ops)]


def kernels_on():
    """On a CPU, the Triton kernels run under the interpreter in an engine built in the block
    (its layers read TRITON_INTERPRET when it is built), so that their launches are there to
    watch."""
    return triton_interpret(None if torch.cuda.is_available() else "1")


@dataclass
class Step:
    number: int
    cells: dict[int, Cell]          # request id -> what it did; absent: not added or gone
    pool: dict[str, int] = field(default_factory=dict)
    preemptions: int = 0
    graphs: dict[int, str] = field(default_factory=dict)    # bucket -> "capture" / "replay"
    buffers: dict[str, tuple] = field(default_factory=dict)  # decode input name -> values
    same_buffers: bool = True       # decode_buffers() returned the same tensors as at step 1
    ops: list[Op] = field(default_factory=list)  # what the step dispatched, where it is watched


@dataclass
class Run:
    version: str
    prompts: dict[int, tuple[int, ...]] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    block_size: int = 0
    num_lanes: int = 0
    aborted: dict[int, int] = field(default_factory=dict)  # request id -> the step it was after
    shards: list[dict] = field(default_factory=list)  # a tensor-parallel engine's shards()

    @property
    def requests(self) -> list[int]:
        return sorted(self.prompts)

    def step(self, number: int) -> Step:
        return next(s for s in self.steps if s.number == number)


def _has(engine, name: str) -> bool:
    return callable(getattr(engine, name, None))


class Recorder:
    """Drives an engine the way a scenario says and records each step. A scenario calls add(),
    step(), abort() and finish(); the Run is in `.run`."""

    def __init__(self, engine, version: str, checkpoint=None, watch: int = 0):
        """watch: the step whose dispatched ops are recorded (0: none); checkpoint: the one the
        engine was built from, whose tensors say which weights an op reads."""
        self.engine, self.watch = engine, watch
        self.names = {(t.data_ptr(), t.numel()): n for n, t in checkpoint.tensors.items()} \
            if checkpoint is not None else {}
        self.run = Run(version, num_lanes=getattr(engine, "num_lanes", 0))
        self._buffers: dict[str, Any] | None = None
        self._graphs: dict[int, dict[str, int]] = {}

    def add(self, prompt: list[int], params) -> int:
        rid = self.engine.add_request(list(prompt), params)
        self.run.prompts[rid] = tuple(prompt)
        return rid

    def abort(self, rid: int) -> None:
        self.engine.abort(rid)
        self.run.aborted[rid] = self.run.steps[-1].number if self.run.steps else 0

    def finish(self, limit: int = 64) -> None:
        for _ in range(limit):
            if not self.engine.has_unfinished():
                return
            self.step()
        raise RuntimeError(f"{self.run.version}: the scenario did not end in {limit} steps")

    def step(self) -> Step:
        e = self.engine
        live = [r for r in self.run.prompts if e.output(r).finish_reason is None]
        before = {r: (e.num_cached_tokens(r), len(e.output(r).tokens)) for r in live}
        hits_before = e.prefix_cache_stats()["hit_tokens"] if _has(e, "prefix_cache_stats") else 0
        watch = OpWatch(self.names)
        if self.watch == len(self.run.steps) + 1:
            with watch:
                e.step()
        else:
            e.step()
        stats = e.last_step_stats()
        tables = e.block_tables() if _has(e, "block_tables") else {}
        hits = (e.prefix_cache_stats()["hit_tokens"] if _has(e, "prefix_cache_stats") else 0) \
            - hits_before
        cells = {}
        for r in live:
            out = e.output(r)
            cached, taken = before[r]
            cell = Cell(self._kind(r, stats, cached), tokens=tuple(out.tokens[taken:]),
                        cached=e.num_cached_tokens(r), table=tuple(tables.get(r, ())),
                        finished=out.finish_reason.value if out.finish_reason else "")
            if out.finish_reason is not None:  # its cache is freed in the step it finishes
                cell.rows = 1 if cell.kind == DECODE else None
            elif cell.kind != PREEMPTED:
                cell.rows = cell.cached - cached
            if _has(e, "lane_of"):
                cell.lane = e.lane_of(r)
            if cell.kind in (PREFILL, SLICE) and len(stats.prefill_ids) == 1:
                cell.hit = hits  # with one prefill in the step, the step's hits are its own
            cells[r] = cell
        step = Step(stats.step, cells, ops=segments(watch.ops))
        if _has(e, "pool_stats"):
            step.pool = dict(e.pool_stats())
            self.run.block_size = step.pool["block_size"]
            step.preemptions = e.num_preemptions
        if _has(e, "graph_stats"):
            step.graphs = self._graph_events(e.graph_stats())
        if _has(e, "decode_buffers"):
            step.buffers, step.same_buffers = self._read_buffers(e.decode_buffers())
        self.run.steps.append(step)
        return step

    def _kind(self, r: int, stats, cached_before: int) -> str:
        if r in stats.prefill_ids:
            return PREFILL
        if r in stats.decode_ids:
            return DECODE
        if r in stats.waiting_ids:
            return PREEMPTED if cached_before else WAITING
        return IDLE

    def _graph_events(self, now: dict[int, dict[str, int]]) -> dict[int, str]:
        events = {}
        for bucket, counts in now.items():
            was = self._graphs.get(bucket, {"captures": 0, "replays": 0})
            if counts["captures"] > was["captures"]:
                events[bucket] = "capture"
            elif counts["replays"] > was["replays"]:
                events[bucket] = "replay"
        self._graphs = {b: dict(c) for b, c in now.items()}
        return events

    def _read_buffers(self, buffers: dict) -> tuple[dict[str, tuple], bool]:
        if self._buffers is None:
            self._buffers = dict(buffers)
        same = all(buffers[k] is t for k, t in self._buffers.items())
        values = {k: tuple(buffers[k].flatten().tolist()) for k in ("token_ids", "positions")
                  if k in buffers}
        return values, same


def mark_slices(run: Run) -> Run:
    """A prefill spread over consecutive steps (chunked prefill: a slice of the prompt per
    step) is drawn as slices: every prefill cell of such a stretch becomes SLICE."""
    for r in run.requests:
        stretch: list[Cell] = []
        for step in run.steps + [Step(-1, {})]:
            cell = step.cells.get(r)
            if cell is not None and cell.kind in (PREFILL, SLICE):
                stretch.append(cell)
                continue
            if len(stretch) > 1:
                for c in stretch:
                    c.kind = SLICE
            stretch = []
    return run


def record(engine, version: str, script: Callable[[Recorder], None], checkpoint=None,
           watch: int = 0) -> Run:
    rec = Recorder(engine, version, checkpoint, watch)
    script(rec)
    return mark_slices(rec.run)
