"""Which kernels a pass really ran: a TorchDispatchMode that sees each kernel's torch op (made
with the contract's `kernel_op`, which wraps a launch) as one op, and counts those of one kernels
module.

Seen from below the dispatcher, an engine cannot claim a kernel it skipped: a fallback to PyTorch
shows up as aten ops and no kernel op. CPU graph replay calls the recorded ops again, so replayed
kernels are counted too."""
from __future__ import annotations

from collections import Counter
from types import ModuleType

from torch.utils._python_dispatch import TorchDispatchMode


class KernelCalls(TorchDispatchMode):
    """`with KernelCalls(impl.package.kernels) as calls: ...`, then `calls.names()` or
    `calls.counts["rms_norm"]`."""

    def __init__(self, *modules: ModuleType):
        super().__init__()
        # The kernels name their op namespace after their module's import name.
        self.namespaces = {m.__name__.replace(".", "_") for m in modules}
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if getattr(func, "namespace", None) in self.namespaces:
            self.counts[func._opname] += 1
        return func(*args, **(kwargs or {}))

    def names(self) -> set[str]:
        return set(self.counts)


class AtenCalls(TorchDispatchMode):
    """`with AtenCalls() as calls: ...`, then `calls.counts["cos"]`: how many times each aten op
    (by its name without overload) was dispatched, replayed CPU graph ops included."""

    def __init__(self):
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if getattr(func, "namespace", None) == "aten":
            self.counts[func._opname] += 1
        return func(*args, **(kwargs or {}))
