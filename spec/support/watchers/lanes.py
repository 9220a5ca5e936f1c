"""What a decode lane really carries and where each token's K/V really lands, watched from the
aten ops a step runs, never from what the engine says about its lanes.

A forward pass takes in its token ids through one row lookup into the embedding table (OpLog's
`lookups`), and stores each token's K and V with an in-place indexed write into the cache: an
index_copy_ (v05-v07), an index_put_ (v08's PyTorch store) or one custom op (v10's Triton store,
a torch op made with the contract's kernel_op: its schema declares the caches it mutates, so a dispatch
mode sees it as one op, with its slot mapping). All are recognised the same way: an op writes in
place into a tensor of rows [..., kv_heads, head_dim] and takes exactly one 1-D integer tensor as
long as the pass has tokens: the row token i's K/V goes to, counted from the start of the
tensor's storage (so a flat view and its base agree); -1 writes nothing.

The cache contents are compared as well: each cache storage is snapshotted when a window opens
(or just before its first write, the first time it is seen), so every row that changed in the
window is known, however it was written. A copy that no store made shows up there.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchlet.contract import ModelConfig, RequestState

from .allocations import Lookup, OpLog, looked_up, storage, tensors_in

INDEX_DTYPES = (torch.int64, torch.int32)


@dataclass(frozen=True)
class Store:
    storage: int
    rows: torch.Tensor   # the storage row each token's K/V went to, -1 for none
    at: int              # how many ops had run, itself included


@dataclass(frozen=True)
class Pass:
    ids: torch.Tensor                   # the token id each row (each lane, in decode) fed
    stores: dict[int, list[torch.Tensor]]  # cache storage -> rows of every store into it

    def rows(self, cache: int) -> list[int]:
        (rows,) = self.stores[cache]
        return rows.tolist()


class LaneLog(TorchDispatchMode):
    """`with LaneLog(config, caches) as log: engine.step()`, then `log.passes()` (the token ids
    of each forward pass and the rows its stores wrote) and `log.changed()` (rows whose contents
    changed). `caches` are the cache views an earlier window found (`log.caches`), snapshotted
    on entry; caches seen for the first time are added in the order first written (per layer
    K, then V). Lookups are found as OpLog finds them; other ops cost a schema check only, since
    an OpLog's bookkeeping of every op would multiply a step's time."""

    def __init__(self, config: ModelConfig, caches: dict[int, torch.Tensor] | None = None):
        super().__init__()
        self.table_shape = (config.vocab_size, config.hidden_size)
        self.row_shape = (config.num_kv_heads, config.head_dim)
        self.caches = dict(caches or {})  # storage -> the whole storage as rows [N, KV, D]
        self.before: dict[int, torch.Tensor] = {}
        self.lookups: list[Lookup] = []
        self.stores: list[Store] = []
        self.stray: list[str] = []  # ops that wrote a known cache without being a store
        self.num_ops = 0

    def __enter__(self):
        self.before = {s: rows.clone() for s, rows in self.caches.items()}
        return super().__enter__()

    def _rows_of(self, t: torch.Tensor) -> bool:
        kv, d = self.row_shape
        return (t.is_floating_point() and t.dim() >= 2 and tuple(t.shape[-2:]) == (kv, d)
                and t.stride(-1) == 1 and t.stride(-2) == d)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.num_ops += 1
        index = looked_up(func, args, self.table_shape)
        if index is not None:
            self.lookups.append(Lookup(storage(index), index.detach().clone(), self.num_ops))
        elif func._schema.is_mutable:
            self._writes(func, args, kwargs)
        return func(*args, **kwargs)

    def _writes(self, func, args, kwargs) -> None:
        written = [t for t in OpLog._written(func, args, kwargs) if self._rows_of(t)]
        if not written:
            return
        tokens = len(self.lookups[-1].ids) if self.lookups else None
        index = [t for t in tensors_in((args, tuple(kwargs.values())))
                 if t.dim() == 1 and t.dtype in INDEX_DTYPES]
        is_store = len(index) == 1 and len(index[0]) == tokens
        for t in written:
            s = storage(t)
            if is_store:
                self._track(t)
                base = t.storage_offset() // (self.row_shape[0] * self.row_shape[1])
                # no host read here: a graph capture may be recording around this mode
                rows = torch.where(index[0] >= 0, index[0] + base, -1).detach().clone()
                self.stores.append(Store(s, rows, self.num_ops))
            elif s in self.caches:
                self.stray.append(str(func))

    def _track(self, t: torch.Tensor) -> None:
        s = storage(t)
        if s in self.caches:
            return
        kv, d = self.row_shape
        n = t.untyped_storage().nbytes() // (t.element_size() * kv * d)
        rows = t.as_strided((n, kv, d), (kv * d, d, 1), 0)
        self.caches[s] = rows
        self.before[s] = rows.clone()  # before this first write runs

    def passes(self) -> list[Pass]:
        """One per embedding lookup: its ids, and the stores made until the next lookup."""
        ends = [lookup.at for lookup in self.lookups[1:]] + [self.num_ops + 1]
        out = []
        for lookup, end in zip(self.lookups, ends):
            stores: dict[int, list[torch.Tensor]] = {}
            for s in self.stores:
                if lookup.at <= s.at < end:
                    stores.setdefault(s.storage, []).append(s.rows)
            out.append(Pass(lookup.ids, stores))
        return out

    def changed(self) -> dict[int, set[int]]:
        """Cache storage -> rows whose contents differ from the window's start (NaN = NaN)."""
        out = {}
        for s, old in self.before.items():
            new = self.caches[s]
            same = (new == old) | (new.isnan() & old.isnan())
            out[s] = set(torch.nonzero(~same.flatten(1).all(1)).flatten().tolist())
        return out


@dataclass
class LaneTracker:
    """Steps an engine under a LaneLog and checks, at every step, what the passes really read and
    wrote against what lane_of() says:

    - the decode lane lane_of(r) names feeds r's newest token;
    - r's K/V rows stay where its prefill stored them while r lives: nothing else writes them,
      they hold what cached_kv(r) reports, and each new token's row extends them (the next row
      of the same block; a block starts anew only at a multiple of `block_size`);
    - with fixed lanes (block_size None: a lane's rows are one run, v05-v07) lane s is one place:
      whoever holds it stores its rows from the same first row, so a newcomer in a freed lane
      takes over its predecessor's rows.
    """
    engine: object
    config: ModelConfig
    block_size: int | None = None
    caches: dict[int, torch.Tensor] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)      # cache storages: L0 K, L0 V, L1 K, ...
    home: dict = field(default_factory=dict)            # request -> its rows, by position
    lane_start: dict[int, int] = field(default_factory=dict)  # fixed lanes: lane -> first row

    def step(self, ids) -> list:
        """engine.step(), checked; `ids` are the requests to follow. Returns what step returned."""
        e = self.engine
        outputs = {i: e.output(i) for i in ids}
        fed = {i: o.prompt + o.tokens for i, o in outputs.items()}
        lane = {i: e.lane_of(i) for i in ids if outputs[i].state is RequestState.RUNNING}
        self.home = {i: rows for i, rows in self.home.items() if lane.get(i) is not None}
        with LaneLog(self.config, self.caches) as log:
            out = e.step()
        self.caches = log.caches
        if not out:
            return out
        stats = e.last_step_stats()
        decode, prefill = self._split(log.passes(), stats, fed)
        assert not log.stray, f"a step wrote into the K/V cache outside its stores: {log.stray}"
        if decode is not None:
            self._check_decode(decode, stats.decode_ids, lane, fed)
        if prefill is not None:
            self._check_prefill(prefill, stats.prefill_ids, fed)
        self._check_untouched(log, decode, prefill, stats)
        return out

    def _split(self, passes, stats, fed):
        """(decode pass, prefill pass). The prefill pass is the one fed the newcomers'
        sequences; should the decode lanes happen to feed those very ids too, the later one, as
        every version runs decode first."""
        assert len(passes) == bool(stats.decode_ids) + bool(stats.prefill_ids), \
            f"{len(passes)} forward passes for decode {stats.decode_ids}, prefill {stats.prefill_ids}"
        prefill = None
        if stats.prefill_ids:
            newcomers = [t for i in stats.prefill_ids for t in fed[i]]
            fits = [k for k, p in enumerate(passes) if p.ids.tolist() == newcomers]
            assert fits, f"no pass fed the newcomers' tokens {newcomers}"
            prefill = passes.pop(fits[-1])
        for p in passes + ([prefill] if prefill else []):
            if not self.order:
                self.order = list(p.stores)
                assert len(self.order) == 2 * self.config.num_layers, \
                    f"a pass stored into {len(self.order)} caches, not K and V of every layer"
            assert list(p.stores) == self.order, "a pass stored its K/V into other tensors"
            assert all(len(rows) == 1 for rows in p.stores.values()), \
                "a pass stored into one cache more than once"
        return (passes[0] if passes else None), prefill

    def _check_decode(self, decode: Pass, ids, lane, fed):
        lanes = decode.ids.tolist()
        for i in ids:
            s = lane[i]
            assert s is not None and s < len(lanes), f"request {i} decoded in lane {s} of {lanes}"
            assert lanes[s] == fed[i][-1], (
                f"lane {s}, request {i}'s lane by lane_of, fed {lanes[s]}, not its newest token "
                f"{fed[i][-1]}; the lanes fed {lanes}")
            for c in self.order:
                row, rows = decode.rows(c)[s], self.home[i][c]
                self._extends(i, rows, row)
                rows.append(row)

    def _check_prefill(self, prefill: Pass, ids, fed):
        start = 0
        for i in ids:
            n = len(fed[i])
            self.home[i] = {}
            for c in self.order:
                rows = []
                for row in prefill.rows(c)[start:start + n]:
                    if rows:
                        self._extends(i, rows, row)
                    rows.append(row)
                self.home[i][c] = rows
            start += n
            s = self.engine.lane_of(i)
            if self.block_size is None and s is not None:  # done at its first token: no lane
                first = self.home[i][self.order[0]][0]
                assert self.lane_start.setdefault(s, first) == first, (
                    f"request {i} in lane {s} stores from row {first}; lane {s}'s earlier holders "
                    f"stored from row {self.lane_start[s]}: the lane moved")
                others = {t for o, t in self.lane_start.items() if o != s}
                assert first not in others, f"lanes share rows: {self.lane_start}"

    def _extends(self, i, rows, row):
        p = len(rows)
        if self.block_size is None or p % self.block_size:
            assert row == rows[-1] + 1, (
                f"request {i}'s K/V for position {p} went to row {row}; its earlier rows are "
                f"{rows[0]}..{rows[-1]}: its cache moved")
        else:
            assert row >= 0 and row % self.block_size == 0, \
                f"request {i} starts a block at row {row}, not at a block's first row"

    def _check_untouched(self, log: LaneLog, decode, prefill, stats):
        changed = log.changed()
        stored = {c: {r for p in (decode, prefill) if p for r in p.rows(c) if r >= 0}
                  for c in self.order}
        e = self.engine
        for c in self.order:
            stray = changed.get(c, set()) - stored[c]
            assert not stray, f"cache rows {sorted(stray)} changed, yet no store wrote them"
        live = {i: rows for i, rows in self.home.items() if e.lane_of(i) is not None}
        owner = {}
        for i, rows in live.items():
            for c in self.order:
                for row in rows[c]:
                    assert owner.setdefault((c, row), i) == i, \
                        f"requests {owner[c, row]} and {i} both keep K/V in row {row}"
        for i, rows in live.items():
            new = len(rows[self.order[0]]) if i in stats.prefill_ids else \
                int(i in stats.decode_ids)  # rows this step stored for i
            for c in self.order:
                old = set(rows[c][:len(rows[c]) - new])
                hit = old & (changed.get(c, set()) | stored[c])
                assert not hit, f"request {i}'s K/V rows {sorted(hit)} were written while it lives"
            cached = [t for pair in e.cached_kv(i) for t in pair]
            for c, kv in zip(self.order, cached):
                held = self.caches[c][rows[c]]
                assert held.shape == kv.shape and torch.equal(held, kv), (
                    f"request {i}'s rows {rows[c][0]}..{rows[c][-1]} do not hold the K/V "
                    f"cached_kv reports")
