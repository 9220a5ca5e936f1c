"""One decode step, traced from outside: which files of the tree of versions run code, and how
often a version's code calls straight into another version's code (a reader's back and forth).

The version is built on the tiny Qwen2 fixture on the CPU, graphs off (so the step's Python
runs, not a replay), three requests are decoded until steady, and one more step() is watched
with sys.setprofile. `python -m spec.support.watchers.step_trace v14 v08` prints the figures.
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass

import torch

import implementations
from torchlet.contract import GenerationParams
from torchlet.engines import build_sized
from torchlet.running import triton_interpret

from spec.support.models.fixtures import tiny_checkpoint


@dataclass
class StepTrace:
    files: Counter          # file (relative to the tree) -> functions entered in it
    hops: Counter           # (caller file:function, callee file:function) -> calls

    @property
    def packages(self) -> list[str]:
        return sorted({f.split(os.sep)[0] for f in self.files})

    @property
    def num_hops(self) -> int:
        return sum(self.hops.values())


def trace_step(name: str) -> StepTrace:
    """The trace of one steady decode step of the version. Triton layers take their PyTorch
    path (the interpreter off, as a step's own Python is what a reader follows)."""
    with layers_on_pytorch():
        return _trace(name)


def layers_on_pytorch():
    """Engines built inside take their layers' PyTorch path: the interpreter off."""
    return triton_interpret("0")


def steady_engine(name: str):
    """(engine, tree root): the version built on the tiny Qwen2 fixture, graphs off, three
    requests decoded until steady, so that its next step() is a plain decode step. The root (the
    tree of versions' folder, with a trailing separator) tells the tree's files from others."""
    version = implementations.load(name)
    names = {o.name for o in version.options}
    options = {"use_graphs": False} if "use_graphs" in names else {}
    engine = build_sized(version, tiny_checkpoint("tiny_qwen2"), dtype=torch.float32,
                         max_model_len=64, max_running=4, **options)
    for prompt in ([1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11, 12]):
        engine.add_request(prompt, GenerationParams(max_new_tokens=20, ignore_eos=True))
    for _ in range(4):
        engine.step()
    root = os.path.dirname(os.path.realpath(version.package.__file__))
    return engine, os.path.dirname(root) + os.sep


def _trace(name: str) -> StepTrace:
    engine, root = steady_engine(name)
    files, hops = Counter(), Counter()

    def package(path: str) -> str | None:
        return path[len(root):].split(os.sep)[0] if path.startswith(root) else None

    def profile(frame, event, arg):
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(root):
            return
        files[path[len(root):]] += 1
        caller = frame.f_back
        if caller is not None and package(caller.f_code.co_filename) not in (None, package(path)):
            hops[(f"{caller.f_code.co_filename[len(root):]}:{caller.f_code.co_name}",
                  f"{path[len(root):]}:{frame.f_code.co_name}")] += 1

    sys.setprofile(profile)
    try:
        engine.step()
    finally:
        sys.setprofile(None)
    return StepTrace(files, hops)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["v14"]:
        trace = trace_step(name)
        print(f"{name}: {len(trace.files)} files in {len(trace.packages)} packages, "
              f"{trace.num_hops} calls from one version's code into another's")
        for (caller, callee), n in trace.hops.most_common():
            print(f"   {n:3d}  {caller} -> {callee}")
