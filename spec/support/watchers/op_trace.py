"""Every op a call dispatches, in order, with its output's shape: how a page shows that a
version runs its predecessor's ops one for one where its idea does not reach (v18 on float
weights, v19 without a grammar)."""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


def op_trace(run) -> tuple[list[tuple[str, tuple]], object]:
    """(the ops run() dispatched as (name, output shape), what run() returned)."""
    log = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            log.append((str(func), tuple(getattr(out, "shape", ()))))
            return out

    with Ops():
        result = run()
    return log, result
