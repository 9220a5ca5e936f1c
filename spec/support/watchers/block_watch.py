"""Block tables as the decode step reads them, watched from outside the engine.

`paged_metadata()` and `block_tables()` are reports, rebuilt from the pool; the decode step reads
other tensors: the ones `decode_buffers()` names. A TorchDispatchMode (StepLog) sees, during one
`engine.step()`, the value each of those buffers held when the model pass first read it, every
K/V store (an in-place write into a float tensor at the rows a 1-D integer index names: K and V
of every layer) and every logits-wide result. BlockWatch drives the steps and checks, after each:

- the decode pass read all five buffers: its logits were computed from token_ids, positions,
  block_tables and context_lens, and its K/V went to the slots computed from slot_mapping;
- each live lane carries its request's last token and position, `context_lens` = its tokens, a
  table row naming the blocks that hold those tokens (the slots its earlier stores wrote), null
  past them, and a slot in its own last block at the token's offset;
- each idle lane maps to the null block: a zero row, context 0, a slot inside block 0;
- the running requests hold disjoint blocks, never block 0, as many as the pool says are used;
- no logits hold a NaN; with poison_free_blocks, every block no running request holds is NaN;
- every slot a step reads holds the K/V of exactly the token prefix it is read for (each store
  records, per slot, the prefix its token ends), and no store writes a slot another running
  request reads.

An engine with the prefix cache (PrefixCacheAPI) may share full blocks: a prefill then stores
only the rows after the blocks it shares, which must hold that very prefix already; running
requests may hold a block together; and a block nobody holds may keep its K/V, cached, if it is
a full block of one known prefix. block_tables() (a report) only tells which of the request's
slots a prefill's first stored row starts from; every slot it names is checked against the
stores.

Which lane carries a decoding request is found from what the pass read: the lane fed its last
token at its position, whose table reaches the slots its earlier tokens were stored at (from v20
a request may move to a lower lane before a decode pass). lane_of() after the step must name
that lane for a request still running.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from spec.support.watchers.allocations import LIFTS, OpLog, storage, tensors_in
from torchlet.contract import PrefixCacheAPI, RequestState

NULL_BLOCK = 0


@dataclass(frozen=True)
class Store:
    target: torch.Tensor   # the cache (or a view of it) written
    slots: list[int]       # the rows written, in order
    source: frozenset      # the decode buffers its index was computed from


class StepLog(TorchDispatchMode):
    """What one step did with the paged K/V: `read` (buffer name -> its value at the first op
    that read it without writing it), `stores`, `logits_from` (for each logits-wide result, the
    decode buffers it was computed from) and `nan_logits` (how many of them hold a NaN).

    "Computed from" follows the data: a buffer's storage is marked with its name, and each op's
    fresh results carry the marks of all its inputs (in-place writes pass none on: a cache that
    a store wrote does not make everything that reads it "computed from" the index)."""

    def __init__(self, buffers: dict[str, torch.Tensor], vocab: int):
        super().__init__()
        self.buffers = {storage(t): (name, t) for name, t in buffers.items()}
        self.marks = {s: frozenset([name]) for s, (name, _) in self.buffers.items()}
        self.vocab = vocab
        self.read: dict[str, torch.Tensor] = {}
        self.stores: list[Store] = []
        self.gathers: list[tuple[int, list[int]]] = []  # (cache storage, slots read by index)
        self.prefill_caches: set[int] = set()  # storages of the caches a prefill stored into
        self.logits_from: list[frozenset] = []
        self.nan_logits = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = tensors_in((args, tuple(kwargs.values())))
        places = [storage(t) for t in inputs]
        written = OpLog._written(func, args, kwargs) if func._schema.is_mutable else []
        written_ids = {storage(t) for t in written}
        for s in places:
            if s in self.buffers and s not in written_ids:  # copying new values in is no read
                name, whole = self.buffers[s]
                self.read.setdefault(name, whole.detach().clone())
        if not written and self.prefill_caches:  # a read, by slots, of a cache a prefill wrote
            stored = self.prefill_caches
            index = [t for t in inputs if t.dim() == 1 and not t.is_floating_point()
                     and t.dtype != torch.bool]
            caches = [s for t, s in zip(inputs, places) if s in stored and t.is_floating_point()]
            if index and caches:
                self.gathers.append((caches[0], index[0].tolist()))
        if written:
            index = [(t, s) for t, s in zip(inputs, places) if t.dim() == 1 and s not in written_ids
                     and not t.is_floating_point() and t.dtype != torch.bool]
            if index and any(t.is_floating_point() and s not in written_ids
                             for t, s in zip(inputs, places)):
                for target in (t for t in written if t.is_floating_point()):
                    self.stores.append(Store(target, index[0][0].tolist(),
                                             self.marks.get(index[0][1], frozenset())))
                    if "slot_mapping" not in self.stores[-1].source:
                        self.prefill_caches.add(storage(target))
        out = func(*args, **kwargs)
        marks = frozenset().union(*(self.marks.get(s, frozenset()) for s in places))
        in_storages = set(places)
        for t in tensors_in(out):
            if func in LIFTS or storage(t) not in in_storages:  # fresh: computed from its inputs
                self.marks[storage(t)] = frozenset() if func in LIFTS else marks
                if t.is_floating_point() and t.dim() >= 1 and t.shape[-1] == self.vocab:
                    self.logits_from.append(self.marks[storage(t)])
                    self.nan_logits += bool(torch.isnan(t).any())
        return out


class BlockWatch:
    """`watch.add(prompt, params)` and `watch.step()` in place of the engine's, or `run(schedule)`;
    every step is checked as the module docstring says. `peak_blocks`: the most blocks the
    running requests held at once, counted from what the steps stored and read."""

    def __init__(self, engine, vocab: int, poisoned: bool = False, slices: bool = False):
        """slices: the engine may compute a prompt over several steps (chunked prefill), each
        step's slice storing the rows right after the ones its request stored before."""
        self.engine, self.vocab, self.poisoned, self.slices = engine, vocab, poisoned, slices
        stats = engine.pool_stats()
        self.block_size, self.num_blocks = stats["block_size"], stats["num_blocks"]
        self.buffers = engine.decode_buffers()
        self.num_lanes = self.buffers["block_tables"].shape[0]
        self.ids: list[int] = []
        self.slots: dict[int, list[int]] = {}      # running request -> slot of each cached token
        self.caches: dict[int, torch.Tensor] = {}  # every K/V cache a store wrote, by storage
        self.holders: dict[int, set[int]] = {}     # block -> every request seen holding it
        self.content: dict[int, tuple[int, ...]] = {}  # slot -> the prefix its stored token ends
        self.shares = isinstance(engine, PrefixCacheAPI)
        self.peak_blocks = 0
        self.decode_steps = 0
        # The latest step's rows, as its stores showed them: request -> rows its prefill (or
        # slice) stored, and the lanes its decode pass ran live.
        self.prefilled: dict[int, int] = {}
        self.decoded = 0

    def add(self, prompt, params) -> int:
        self.ids.append(self.engine.add_request(prompt, params))
        return self.ids[-1]

    def run(self, schedule, after_step=lambda: None) -> list[int]:
        """[(steps before adding, prompt, params)], then steps until every request is done;
        after_step() after each step."""
        for gap, prompt, params in schedule:
            for _ in range(gap):
                self.step()
                after_step()
            self.add(prompt, params)
        while self.engine.has_unfinished():
            self.step()
            after_step()
        return self.ids

    def tables(self) -> dict[int, list[int]]:
        """Running request -> the blocks holding its tokens, as its stores and reads showed."""
        return {i: self.blocks_of(slots) for i, slots in self.slots.items()}

    def kv_bytes_allocated(self) -> int:
        """Bytes of the storage of every K/V cache the steps wrote: what the pool really holds."""
        return sum(t.untyped_storage().nbytes() for t in self.caches.values())

    def step(self):
        e = self.engine
        sequences = {i: o.prompt + o.tokens for i in self.ids
                     if (o := e.output(i)).state is not RequestState.FINISHED}
        ran = e.last_step_stats()
        with StepLog(self.buffers, self.vocab) as log:
            outputs = e.step()
        stats = e.last_step_stats()
        if stats is None or ran is not None and stats.step == ran.step:  # no step ran
            return outputs
        assert log.nan_logits == 0, f"{log.nan_logits} logits tensors of this step hold a NaN"
        self.prefilled, self.decoded = {}, 0
        for s in log.stores:
            self.caches.setdefault(storage(s.target), s.target)
        if stats.decode_ids:
            self._check_decode(log, stats.decode_ids, sequences)
        self._check_prefill(log, stats.prefill_ids, sequences)
        for i in list(self.slots):
            if e.output(i).state is not RequestState.RUNNING:  # finished or preempted
                del self.slots[i]
        self._check_ownership()
        if self.poisoned:
            self._check_poison()
        return outputs

    # --- the checks ---------------------------------------------------------------------------

    def slot(self, table, position: int) -> int:
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def blocks_of(self, slots: list[int]) -> list[int]:
        return [slots[p] // self.block_size for p in range(0, len(slots), self.block_size)]

    def _observed_lanes(self, read, decode_ids, sequences) -> dict[int, int]:
        """Request -> the lane of the decode pass that carried it: fed its last token at its
        position, with its context, through a table that reaches the slots its tokens were
        stored at. lane_of() after the step names the same lane for a request still running."""
        found: dict[int, int] = {}
        for i in decode_ids:
            seq, now = sequences[i], self.engine.lane_of(i)
            n = len(seq)
            # lane_of's lane first: two requests whose every stored token is shared (the prefix
            # cache) read the same slots, and only their new tokens' slots tell them apart
            free = sorted(set(range(self.num_lanes)) - set(found.values()), key=lambda s: s != now)
            for lane in free:
                row = read["block_tables"][lane]
                if (read["context_lens"][lane], read["token_ids"][lane],
                        read["positions"][lane]) == (n, seq[-1], n - 1) \
                        and [self.slot(row, p) for p in range(n - 1)] == self.slots.get(i):
                    found[i] = lane
                    break
            assert i in found, (f"no lane of the decode pass fed request {i}'s token {seq[-1]} at "
                                f"position {n - 1} through the slots it was stored at")
            assert now in (None, found[i]), \
                f"request {i} decoded in lane {found[i]}, yet lane_of() says {now}"
        return found

    def _check_decode(self, log, decode_ids, sequences):
        self.decode_steps += 1
        unread = set(self.buffers) - set(log.read)
        assert not unread, f"the decode pass never read decode_buffers()' {sorted(unread)}"
        decode_stores = [s for s in log.stores if "slot_mapping" in s.source]
        assert decode_stores, "the decode pass stored no K/V at slots computed from slot_mapping"
        inputs = {"token_ids", "positions", "block_tables", "context_lens"}
        assert any(inputs <= marks for marks in log.logits_from), (
            f"no logits of this step were computed from decode_buffers()' {sorted(inputs)}")
        read = {name: t.tolist() for name, t in log.read.items()}
        live = {lane: i for i, lane in self._observed_lanes(read, decode_ids, sequences).items()}
        self.decoded = sum(n > 0 for n in read["context_lens"])
        bucket = len(decode_stores[0].slots)
        assert max(live) < bucket, f"lane {max(live)} decodes, but the stores cover {bucket} lanes"
        for lane in range(self.num_lanes):
            row, n = read["block_tables"][lane], read["context_lens"][lane]
            slot = read["slot_mapping"][lane]
            if lane not in live:
                assert set(row) == {NULL_BLOCK} and n == 0 and 0 <= slot < self.block_size, (
                    f"idle lane {lane} does not map to the null block: its table names blocks "
                    f"{sorted(set(row) - {NULL_BLOCK})}, context {n}, slot {slot}")
                continue
            i = live[lane]
            seq = sequences[i]
            assert n == len(seq), f"lane {lane} (request {i}): context {n}, {len(seq)} tokens"
            fed = (read["token_ids"][lane], read["positions"][lane])
            assert fed == (seq[-1], n - 1), f"lane {lane} (request {i}) fed token, position {fed}"
            blocks = -(-n // self.block_size)
            assert set(row[blocks:]) <= {NULL_BLOCK}, f"lane {lane}: {row} past {blocks} blocks"
            assert NULL_BLOCK not in row[:blocks], f"lane {lane}: the null block in {row}"
            held = [self.slot(row, p) for p in range(n - 1)]
            self._check_content(held, seq, f"lane {lane} (request {i})")
            assert held == self.slots.get(i), (
                f"lane {lane} (request {i}) reads its tokens through {row[:blocks]}, but they were "
                f"stored at slots {self.slots.get(i)}")
            assert slot == self.slot(row, n - 1), (
                f"lane {lane} (request {i}) stores its token {n - 1} at slot {slot}, not in its "
                f"last block {row[blocks - 1]} at offset {(n - 1) % self.block_size}")
            assert all(s.slots[lane] == slot for s in decode_stores), (
                f"lane {lane}'s K/V went elsewhere than its slot_mapping entry {slot}")
            others = [j for j in decode_ids if j != i and slot in self.slots.get(j, ())]
            assert not others, f"lane {lane} stores into slot {slot}, which {others} read"
            self.content[slot] = tuple(seq)
            self.slots[i] = held + [slot]

    def _check_content(self, slots: list[int], seq: list[int], who: str) -> None:
        for p, s in enumerate(slots):
            assert self.content.get(s) == tuple(seq[:p + 1]), (
                f"{who} reads its token {p} from slot {s}, which holds another prefix's K/V")

    def _check_prefill(self, log, prefill_ids, sequences):
        stores = [s for s in log.stores if "slot_mapping" not in s.source]
        if not prefill_ids:
            assert not stores, "K/V was stored outside the decode pass in a step without prefill"
            return
        by_target: dict[int, list[int]] = {}
        for s in stores:
            by_target.setdefault(storage(s.target), []).extend(s.slots)
        written = list(by_target.values())
        assert written and all(w == written[0] for w in written), "K and V went to different slots"
        slots, start = written[0], 0
        # A prefill that shares a prefix reads each request's whole context back from the
        # cache, by slots: the first cache read in this step is layer 0's K, one per request.
        first = log.gathers[0][0] if self.shares and log.gathers else None
        contexts = [g for c, g in log.gathers if c == first]
        assert not contexts or len(contexts) == len(prefill_ids), (
            f"{len(prefill_ids)} requests prefilled, {len(contexts)} contexts read back")
        for k, i in enumerate(prefill_ids):
            seq = sequences[i]
            before = self.slots.get(i, [])  # what its earlier slices stored (slices only)
            assert not before or self.slices, f"request {i} was prefilled twice while running"
            n, shared = len(seq), []
            if contexts:  # the rows it shares, or stored before, come first, unstored now
                context = contexts[k]
                n = len(context) if self.slices else n  # a slice ends where its context does
                assert n <= len(seq) and len(context) == n and start < len(slots) \
                    and slots[start] in context, (
                        f"request {i}'s prefill read a context of {len(context)} slots for its "
                        f"{len(seq)} tokens, and stored from slot "
                        f"{slots[start] if start < len(slots) else None}")
                h = context.index(slots[start])
                if before:
                    assert context[:h] == before, (
                        f"request {i}'s slice stores from its token {h}, but its earlier slices "
                        f"stored {len(before)} tokens, at {before[-3:]}...")
                else:
                    assert h % self.block_size == 0, (
                        f"request {i} shares {h} tokens, not whole blocks")
                shared = context[:h]
                self._check_content(shared, seq, f"request {i}'s prefill")
            mine = slots[start:start + n - len(shared)]
            start += len(mine)
            self.prefilled[i] = len(mine)
            table = self.blocks_of(shared + mine)
            assert len(shared + mine) == n and shared + mine == [self.slot(table, p)
                                                                 for p in range(n)], (
                f"request {i}'s prefill stored its {n} tokens at {mine}, not block by block")
            assert NULL_BLOCK not in table, f"request {i} was prefilled into the null block"
            for p, s in enumerate(mine, start=len(shared)):
                self.content[s] = tuple(seq[:p + 1])
            self.slots[i] = shared + mine
        assert start == len(slots), f"the prefill stored {len(slots)} tokens, {start} were fed"

    def _check_ownership(self):
        owned = [b for slots in self.slots.values() for b in self.blocks_of(slots)]
        if not self.shares:
            assert len(owned) == len(set(owned)), f"a block is held twice: {self.tables()}"
        if self.slices:
            # A prompt still being computed holds the blocks of its whole sequence: those its
            # slices stored, then the ones block_tables() names for the rows still to come.
            for i, table in self.engine.block_tables().items():
                stored = self.tables().get(i, [])
                assert table[:len(stored)] == stored, (
                    f"request {i}'s table {table} does not start with the blocks it stored, "
                    f"{stored}")
                owned += table[len(stored):]
        owned = sorted(set(owned))
        for i, table in self.tables().items():
            for b in table:
                self.holders.setdefault(b, set()).add(i)
        assert all(0 < b < self.num_blocks for b in owned), f"blocks out of the pool: {owned}"
        stats = self.engine.pool_stats()
        assert stats["num_used"] == len(owned), (
            f"the pool counts {stats['num_used']} blocks used, the running requests hold "
            f"{len(owned)}")
        assert stats["num_used"] + stats["num_free"] == stats["num_usable"]
        self.peak_blocks = max(self.peak_blocks, len(owned))

    def _check_poison(self):
        owned = {b for slots in self.slots.values() for b in self.blocks_of(slots)}
        free = [b for b in range(1, self.num_blocks) if b not in owned and not self.cached(b)]
        for cache in self.caches.values():
            blocks = cache.reshape(self.num_blocks, self.block_size, -1)
            clean = [b for b in free if not torch.isnan(blocks[b]).all()]
            assert not clean, f"blocks {clean} are held by no running request but are not NaN"

    def cached(self, block: int) -> bool:
        """With the prefix cache, a block nobody holds may keep its K/V if it is a full block of
        one known prefix: every slot's stored prefix extends the one before it."""
        if not self.shares:
            return False
        prefixes = [self.content.get(block * self.block_size + o) for o in range(self.block_size)]
        return all(p is not None for p in prefixes) and all(
            b[:-1] == a for a, b in zip(prefixes, prefixes[1:])) and \
            len(prefixes[0]) % self.block_size == 1 % self.block_size
