"""Watching a decode step from outside the engine: does the model's Python code run, and which ops
does it dispatch? A replayed step must show neither; an eager step shows both.

The model's code is the Python of a version's declared `layers` (a module, or the modules of its
class, of the parts it composes (v08 on: its ops and memory) and of the classes they subclass) and
of every module of the same tree that it draws functions, classes or modules from (v07's layers
are v05's model.py, which draws on v02's, v01_1's, v01_0's and v00's; v09's run v08's decoder over
v09's ops, from v09's model.py, which draws on kernels.py). It is found from what the version
declares, never from the engine's attributes, so an engine cannot hide its model from the watch.

    with ModelWatch(impl) as watch:
        engine.step()
    watch.model_calls   # model functions entered from the host: ["forward_decode", ...]
    watch.model_ops     # aten ops dispatched with a model function on the Python stack
    watch.ops           # every aten op dispatched from the host, replayed ones included

Code that runs *inside* an op (a Triton kernel under the CPU interpreter, a custom op's body) is
the op's kernel, which a replay is meant to run, so it is not counted as a model call.

On CUDA, `CudaLaunches` counts what the profiler sees the host ask of the driver in one block:
graph launches and kernel launches.
"""
from __future__ import annotations

import os
import sys
import types
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def model_files(version, also=()) -> frozenset[str]:
    """Real paths of the source files that hold the version's model code (and of the modules in
    `also`, with what they draw on)."""
    root = Path(os.path.realpath(version.package.__file__)).parent.parent  # the tree of versions
    files: set[str] = set()
    seen: set[str] = set()
    layers = version.layers  # v00's a module; later versions' an instance of their decoder class
    pending = [layers] if isinstance(layers, types.ModuleType) else \
        [sys.modules[c.__module__] for c in model_classes(layers)]
    pending += also
    while pending:
        module = pending.pop()
        path = getattr(module, "__file__", None)
        if module.__name__ in seen or not path:
            continue
        seen.add(module.__name__)
        path = os.path.realpath(path)
        if not Path(path).is_relative_to(root):
            continue  # torch, typing, the harness: not the version's model
        files.add(path)
        for value in vars(module).values():
            if isinstance(value, types.ModuleType):
                pending.append(value)
            elif isinstance(getattr(value, "__module__", None), str):
                owner = sys.modules.get(value.__module__)
                if owner is not None:
                    pending.append(owner)
    return frozenset(files)


def model_classes(layers) -> list[type]:
    """The classes whose methods a decoder's passes run: its own class, the class of each part it
    composes (the values it holds: v08 on, its ops, an instance, and its memory, a class) and what
    they subclass. A version that swaps only a part (v09's ops, v10's memory) keeps v08's decoder
    class, so its own model.py is reached through the part alone."""
    parts = [type(layers)] + [value if isinstance(value, type) else type(value)
                              for value in vars(layers).values()]
    return [cls for part in parts for cls in part.__mro__]


class ModelWatch:
    """Records, while active, the model functions that run and the aten ops dispatched (see the
    module docstring). Uses sys.setprofile, not settrace, so a coverage tracer keeps running."""

    def __init__(self, version, also=()):
        """also: more of the version's modules whose code counts as the model's (v11's sampler)."""
        self.files = model_files(version, also)
        self._is_model: dict[str, bool] = {}
        self._in_op = 0
        self.model_calls: list[str] = []
        self.ops: list[str] = []
        self.model_ops: list[str] = []

    def _model_code(self, code) -> bool:
        known = self._is_model.get(code.co_filename)
        if known is None:
            known = self._is_model[code.co_filename] = \
                os.path.realpath(code.co_filename) in self.files
        return known

    def _profile(self, frame, event, arg):
        if event == "call" and not self._in_op and self._model_code(frame.f_code):
            self.model_calls.append(frame.f_code.co_qualname)

    def _model_on_stack(self) -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if self._model_code(frame.f_code):
                return True
            frame = frame.f_back
        return False

    def __enter__(self) -> "ModelWatch":
        self._ops = _Ops(self)
        self._previous = sys.getprofile()
        self._ops.__enter__()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(self._previous)
        self._ops.__exit__(*exc)


class _Ops(TorchDispatchMode):
    def __init__(self, watch: ModelWatch):
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        w = self.watch
        w.ops.append(str(func))
        if w._model_on_stack():
            w.model_ops.append(str(func))
        w._in_op += 1
        # An op's body (a Triton kernel under the CPU interpreter: its Python runs call by call)
        # is the op's kernel, not the model: the watch's profile hook is off until it returns,
        # where it would only count _in_op, at several times the kernel's own cost.
        profile = sys.getprofile()
        sys.setprofile(None)
        try:
            return func(*args, **(kwargs or {}))
        finally:
            sys.setprofile(profile)
            w._in_op -= 1


# The host-side API calls that start kernels outside a graph: the runtime's (torch's own ops) and
# the driver's (Triton launches through it).
KERNEL_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
                   "cuLaunchKernel", "cuLaunchKernelEx")
GRAPH_LAUNCH = "cudaGraphLaunch"


class CudaLaunches:
    """`with CudaLaunches() as launches: engine.step()`, then `launches.graphs` (cudaGraphLaunch
    calls) and `launches.kernels` (kernels launched one by one, outside any graph). Kernels that
    run inside a replayed graph are not launched by the host and are not counted."""

    def __enter__(self) -> "CudaLaunches":
        torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        self._profile = torch.profiler.profile(activities=activities, acc_events=True)
        self._profile.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        torch.cuda.synchronize()
        self._profile.__exit__(*exc)
        events = Counter(e.name for e in self._profile.events())
        # The host's runtime and driver API calls (the events also hold ops and GPU kernels).
        self.calls = {name: n for name, n in events.items() if name.startswith("cu")}
        self.graphs = events[GRAPH_LAUNCH]
        self.kernels = sum(events[name] for name in KERNEL_LAUNCHES)


class CudaStepWatch:
    """Both watches over one block on CUDA: `.model` (a ModelWatch) and `.launches`."""

    def __init__(self, version):
        self.model = ModelWatch(version)
        self.launches = CudaLaunches()

    def __enter__(self) -> "CudaStepWatch":
        self.launches.__enter__()
        self.model.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.model.__exit__(*exc)
        self.launches.__exit__(*exc)
