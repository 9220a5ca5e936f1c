"""What a Triton kernel launched dependent (CUDA's programmatic dependent launch) reads before it
waits for the launch before it, watched under the interpreter.

On a GPU such a kernel may start while the kernel before it still runs: whatever it reads before
`gdc_wait` may not be written yet. The interpreter runs one program after another and has no
such launch, so here the two calls a kernel makes, `tl.extra.cuda.gdc_launch_dependents` and
`gdc_wait`, are recorded where each program makes them, and every load each program issues (the
interpreter's masked loads: the addresses its live lanes read), so a spec can say which tensors
a program read before it waited. CPU tensors are read in place, so an address belongs to the
tensor whose storage holds it."""
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

    def read_before_wait(self, tensors: dict[str, torch.Tensor]) -> set[str]:
        """The names of the tensors this program read before its first wait (an address in no
        tensor named is '?')."""
        return {_owner(a, tensors) for arr in self.before for a in arr.tolist()}


class DependentReads:
    """`reads = DependentReads(monkeypatch)`, run kernels launched with PDL=True, then
    `reads.programs`: one Program per program run, in launch order."""

    def __init__(self, monkeypatch):
        self.programs: list[Program] = []
        self._kernel, self._launched = "?", False
        load = interpreter.InterpreterBuilder.create_masked_load
        call = interpreter.GridExecutor.__call__

        def masked_load(builder, ptrs, mask, other, *rest):
            program = self._current(builder.grid_idx)
            read = np.asarray(ptrs.data)[np.asarray(mask.data, dtype=bool)].ravel().copy()
            (program.after if program.waits else program.before).append(read)
            return load(builder, ptrs, mask, other, *rest)

        def launch(executor, *args, **kwargs):
            self._kernel, self._launched = executor.fn.__name__, True
            return call(executor, *args, **kwargs)

        def lets_next_start(*_args, **_kwargs):
            self._current(interpreter.interpreter_builder.grid_idx).lets_next_start = True

        def wait(*_args, **_kwargs):
            self._current(interpreter.interpreter_builder.grid_idx).waits += 1

        monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_load", masked_load)
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
