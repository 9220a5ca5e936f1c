"""Which tensors engine code creates, reads and writes, watched from the aten ops it runs.

A TorchDispatchMode sees every op below any Python API, so a spec can tell what a step allocated
and which memory its model pass read without reaching into the engine. Tensors are told apart by
their storage (`untyped_storage().data_ptr()`): a view and its base share one.

An op's result is *fresh* when it got storage of its own: factory ops (empty, zeros, full, arange,
scalar_tensor, ...), out-of-place results (add, clone, _to_copy, ...), and the lift ops, which is
how host values enter: `torch.tensor([...])` and even `t[i] = 5` (a 0-dim tensor of the 5) show up
as `aten.lift_fresh`. Views and in-place ops (zero_, fill_, copy_, index_copy_) are not fresh:
their results live in an input's storage, and those inputs are recorded as written.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
# lift_fresh returns the very tensor torch.tensor() made outside the mode: fresh, though it
# shares storage with its "input".
LIFTS = {aten.lift_fresh.default, aten.lift_fresh_copy.default, aten.lift.default}
LOOKUPS = {aten.index.Tensor, aten.embedding.default, aten.index_select.default}


def looked_up(func, args, table_shape) -> torch.Tensor | None:
    """The index of a row lookup into a table of table_shape (the embedding, [vocab, hidden]),
    None for any other op."""
    if func not in LOOKUPS or not table_shape or tuple(args[0].shape) != tuple(table_shape):
        return None
    index = args[2] if func is aten.index_select.default else args[1]
    return index[0] if isinstance(index, (list, tuple)) else index


def storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def tensors_in(value) -> list[torch.Tensor]:
    """The tensors in an op's arguments or results (nested tuples and lists): a hand-rolled
    tree_flatten, which costs most of a watched step otherwise."""
    if isinstance(value, torch.Tensor):
        return [value]
    found = []
    if type(value) in (tuple, list):
        for v in value:
            if isinstance(v, torch.Tensor):
                found.append(v)
            elif type(v) in (tuple, list):
                found += tensors_in(v)
    return found


@dataclass(frozen=True)
class Op:
    name: str
    reads: frozenset[int]          # storages of its tensor inputs
    writes: frozenset[int]         # storages it mutates in place
    fresh: tuple[tuple, ...]       # (shape, dtype) of each result with storage of its own


@dataclass(frozen=True)
class Lookup:
    """One row lookup into the watched table: where its index lives, the ids it held, and its
    place in `OpLog.ops`."""
    storage: int
    ids: torch.Tensor
    at: int


class OpLog(TorchDispatchMode):
    """`with OpLog() as log: engine.step()`, then read `log.ops` (in the order they ran) and
    `log.lookups`: each row lookup into a table of `table_shape` (the embedding, [vocab, hidden]),
    which is where a forward pass takes in its token ids."""

    def __init__(self, table_shape: tuple[int, int] | None = None):
        super().__init__()
        self.table_shape = table_shape
        self.ops: list[Op] = []
        self.lookups: list[Lookup] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = tensors_in((args, tuple(kwargs.values())))
        reads = frozenset(storage(t) for t in inputs)
        writes = frozenset(storage(t) for t in self._written(func, args, kwargs))
        index = looked_up(func, args, self.table_shape)
        if index is not None:
            # clone() inside dispatch runs without this mode, so it is not logged
            self.lookups.append(Lookup(storage(index), index.detach().clone(), len(self.ops)))
        out = func(*args, **kwargs)
        results = tensors_in(out)
        fresh = tuple((tuple(t.shape), t.dtype) for t in results
                      if func in LIFTS or storage(t) not in reads)
        self.ops.append(Op(str(func), reads, writes, fresh))
        return out

    @staticmethod
    def _written(func, args, kwargs) -> list[torch.Tensor]:
        written = []
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            value = kwargs.get(arg.name) if arg.kwarg_only or i >= len(args) else args[i]
            written += tensors_in(value)
        return written

    def last_write_to(self, tensors) -> int | None:
        """Index in `ops` of the last op that wrote into any of these tensors' storage."""
        targets = {storage(t) for t in tensors}
        hits = [i for i, op in enumerate(self.ops) if op.writes & targets]
        return hits[-1] if hits else None
