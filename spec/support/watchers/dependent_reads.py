"""What a Triton kernel launched dependent (CUDA's programmatic dependent launch) reads before it
waits for the launch before it, watched under the interpreter.

On a GPU such a kernel may start while the kernel before it still runs: whatever it reads before
`gdc_wait` may not be written yet. The interpreter runs one program after another and has no
such launch, so here the two calls a kernel makes, `tl.extra.cuda.gdc_launch_dependents` and
`gdc_wait`, are recorded where each program makes them, and every load each program issues (the
interpreter's masked loads: the addresses its live lanes read), so a spec can say which tensors
a program read before it waited. CPU tensors are read in place, so an address belongs to the
tensor whose storage holds it.

Each program's events are kept in order too (Program.events: its loads with their cache
modifier, stores, barriers, waits and atomics with their memory order and the values they
returned), for a kernel whose programs hand data to one another within a launch (v13's
attend_project): a spec can say a program wrote before it signalled, and read only after the
signal."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import triton.language as tl
import triton.runtime.interpreter as interpreter


@dataclass
class Program:
    kernel: str
    index: tuple[int, int, int]
    lets_next_start: bool = False  # called gdc_launch_dependents
    waits: int = 0                 # gdc_wait calls
    before: list[np.ndarray] = field(default_factory=list)  # addresses read before its wait
    after: list[np.ndarray] = field(default_factory=list)
    # (kind, addresses, detail) in program order: ("load", addrs, its cache modifier: "cg",
    # "none"), ("store", addrs, None), ("barrier", empty, None), ("wait", empty, None) (gdc_wait),
    # ("atomic", addrs, (op, order, returned values))
    events: list[tuple[str, np.ndarray, object]] = field(default_factory=list)

    def read_before_wait(self, tensors: dict[str, torch.Tensor]) -> set[str]:
        """The names of the tensors this program read before its first wait (an address in no
        tensor named is '?')."""
        return {_owner(a, tensors) for arr in self.before for a in arr.tolist()}


class DependentReads:
    """`reads = DependentReads(monkeypatch)`, run kernels launched with PDL=True, then
    `reads.programs`: one Program per program run, in launch order."""

    def __init__(self, monkeypatch, lag: bool = False):
        """lag: each program's first atomic read with acquire order (an add of 0) finds the
        count one short of what memory holds, as on a GPU a program may read a count before the
        last program it waits for has added to it: a program that waits for the count must
        read it again."""
        self.programs: list[Program] = []
        self._kernel, self._launched = "?", False
        load = interpreter.InterpreterBuilder.create_masked_load
        call = interpreter.GridExecutor.__call__

        store = interpreter.InterpreterBuilder.create_masked_store
        rmw = interpreter.InterpreterBuilder.create_atomic_rmw
        barrier = interpreter.InterpreterBuilder.create_barrier

        def masked_load(builder, ptrs, mask, other, cache, *rest):
            program = self._current(builder.grid_idx)
            read = _live(ptrs, mask)
            (program.after if program.waits else program.before).append(read)
            program.events.append(("load", read, _name(cache)))
            return load(builder, ptrs, mask, other, cache, *rest)

        def masked_store(builder, ptrs, value, mask, *rest):
            self._current(builder.grid_idx).events.append(("store", _live(ptrs, mask), None))
            return store(builder, ptrs, value, mask, *rest)

        def atomic_rmw(builder, op, ptr, val, mask, sem, scope):
            got = rmw(builder, op, ptr, val, mask, sem, scope)
            program = self._current(builder.grid_idx)
            detail = (_name(op), _name(sem))
            if (lag and detail == ("ADD", "ACQUIRE") and not np.any(val.data)
                    and not any(e[0] == "atomic" and e[2][:2] == detail for e in program.events)):
                got = interpreter.TensorHandle(got.data - 1, got.dtype)
            program.events.append(("atomic", _live(ptr, mask),
                                   detail + (np.asarray(got.data).ravel().tolist(),)))
            return got

        def barrier_(builder):
            self._current(builder.grid_idx).events.append(("barrier", np.empty(0), None))
            return barrier(builder)

        def launch(executor, *args, **kwargs):
            self._kernel, self._launched = executor.fn.__name__, True
            return call(executor, *args, **kwargs)

        def lets_next_start(*_args, **_kwargs):
            self._current(interpreter.interpreter_builder.grid_idx).lets_next_start = True

        def wait(*_args, **_kwargs):
            program = self._current(interpreter.interpreter_builder.grid_idx)
            program.waits += 1
            program.events.append(("wait", np.empty(0), None))

        monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_load", masked_load)
        monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_store", masked_store)
        monkeypatch.setattr(interpreter.InterpreterBuilder, "create_atomic_rmw", atomic_rmw)
        monkeypatch.setattr(interpreter.InterpreterBuilder, "create_barrier", barrier_)
        # The interpreter's builder makes no cache policy (None; its loads ignore it): made the
        # modifier's word ("cg", "none") here, so a load's event says how the kernel asked.
        monkeypatch.setattr(interpreter.InterpreterBuilder, "get_cache_policy",
                            lambda builder, modifier, eviction: modifier)
        monkeypatch.setattr(interpreter.GridExecutor, "__call__", launch)
        monkeypatch.setattr(tl.extra.cuda, "gdc_launch_dependents", lets_next_start)
        monkeypatch.setattr(tl.extra.cuda, "gdc_wait", wait)

    def _current(self, index) -> Program:
        index = tuple(int(i) for i in index)
        last = self.programs[-1] if self.programs else None
        if self._launched or last is None or last.index != index:
            self._launched = False
            last = Program(self._kernel, index)
            self.programs.append(last)
        return last


def _owner(address: int, tensors: dict[str, torch.Tensor]) -> str:
    for name, t in tensors.items():
        start = t.untyped_storage().data_ptr()
        if start <= address < start + t.untyped_storage().nbytes():
            return name
    return "?"


def _live(ptrs, mask) -> np.ndarray:
    """The addresses a masked access touches."""
    return np.asarray(ptrs.data)[np.asarray(mask.data, dtype=bool)].ravel().copy()


def _name(flag) -> str:
    """An IR enum's member or a cache modifier as a plain word ("ACQUIRE", "ADD", "cg")."""
    return str(getattr(flag, "name", flag)).split(".")[-1]
