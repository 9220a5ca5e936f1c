"""A long-lived child that runs pytest again and again in one interpreter, so a mutant costs its
specs and not a fresh torch import and collection setup.

Protocol: one JSON object per line on stdin, {"args": [...], "log": PATH}; for each, one JSON line
{"rc": N} on the protocol stream (the original stdout). pytest's own output goes to PATH.
A harness mutant's request adds "harness": DIR (the folder of the edited copies: DIR/torchlet,
DIR/spec/support, or DIR/implementations for a reference mutant) and "fresh": [module names]:
for that run those modules and their submodules are imported anew, the torchlet subpackages,
the spec/support modules and the `implementations` package among them from DIR; afterwards the
reference modules are back.
"""
from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import json
import os
import sys


def copied(directory: str, name: str) -> tuple[str, list[str] | None] | None:
    """Where in the copies a fresh module is loaded from: (its file, its package's search path or
    None for a module); None for one imported anew from the reference (a spec page)."""
    parts = name.split(".")
    if not (parts[0] == "torchlet" and len(parts) == 2 or name == "implementations"
            or name.startswith("spec.support.")):
        return None
    base = os.path.join(directory, *parts)
    if os.path.isdir(base):
        return os.path.join(base, "__init__.py"), [base]
    if os.path.isfile(base + ".py"):  # a module of its own (torchlet/text.py)
        return base + ".py", None
    return None


@contextlib.contextmanager
def harness_copy(directory: str | None, fresh: list[str]):
    """Run with the modules named in `fresh` (and their submodules) imported anew, the torchlet
    subpackages, spec/support modules and the `implementations` package among them from
    `directory`, the folder of the edited copies; every other module stays the reference's."""
    if not directory:
        yield
        return

    def named(name):
        return any(name == f or name.startswith(f + ".") for f in fresh)

    saved = {n: m for n, m in sys.modules.items() if named(n)}
    for n in saved:
        del sys.modules[n]
    for name in fresh:
        found = copied(directory, name)
        if found is None:
            continue
        spec = importlib.util.spec_from_file_location(name, found[0],
                                                      submodule_search_locations=found[1])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        # `from torchlet import x` reads the package's attribute before sys.modules
        parent, _, child = name.rpartition(".")
        if parent:
            # a run's first mutant of a package the worker has not imported yet
            # (spec.support.collection before any pytest run collected)
            setattr(sys.modules.get(parent) or importlib.import_module(parent), child, module)
        spec.loader.exec_module(module)
    try:
        yield
    finally:
        for n in [n for n in sys.modules if named(n)]:
            del sys.modules[n]
        for name in fresh:  # an edited module the reference had not imported: no attribute left
            parent, _, child = name.rpartition(".")
            if name not in saved and parent in sys.modules and hasattr(sys.modules[parent],
                                                                       child):
                delattr(sys.modules[parent], child)
        sys.modules.update(saved)
        for n, module in saved.items():  # a parent's attribute names the reference again
            parent, _, child = n.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], child, module)


def reference_ops(args: list[str]) -> None:
    """Before the first run against a copied tree: register the reference's compiled ops (v18's
    `torchlet_q` library). torch's cpp_extension keys a build by its source's path, so a copy's
    first call would compile the unchanged C++ again from the copy (about 10 s of a core), and
    the next load from the reference, in any process, once more. No mutant edits the C++ source,
    and a copy's build() takes an op already registered as its own. The module is loaded from
    its file alone (it imports only torch and torchlet.contract): importing the reference's v18
    package would import v09's kernels, whose torch ops a reference mutant's copy may have
    registered under the same names."""
    global _ops_loaded
    if _ops_loaded or not any(a.startswith("--impl-root") for a in args):
        return
    _ops_loaded = True
    import implementations

    path = implementations.REFERENCE_ROOT / "v18_quantized_weights" / "cpu_kernels.py"
    if path.exists():
        spec = importlib.util.spec_from_file_location("_reference_cpu_kernels", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.build()


_ops_loaded = False


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    import pytest  # after the dup: nothing of pytest's reaches the protocol stream

    # The suite's conftest before any run, as a pytest process of its own imports it before
    # anything else: it sets the process up (TRITON_INTERPRET on a CPU) and the specs'
    # machinery it imports binds the reference's modules. A worker whose first run was a
    # harness mutant's executed the edited copy first: kernel_targets then read TRITON_INTERPRET
    # unset (every CPU kernel spec skipped, in every later run) and spec/support's why bound the
    # edited rule.
    importlib.import_module("conftest")

    frozen = False

    for line in sys.stdin:
        request = json.loads(line)
        with open(request["log"], "w") as log:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                reference_ops(request["args"])
                # pytest's unraisableexception plugin ends every run with five gc.collect()
                # passes over this interpreter's whole heap (torch, and what earlier runs left):
                # about 1.2 s of CPU a run, most of a mutant's. A run's verdict is its exit
                # code and junit file, which the plugin's warnings never change.
                with harness_copy(request.get("harness"), request.get("fresh", [])):
                    rc = int(pytest.main([*request["args"], "-p", "no:unraisableexception"]))
            except BaseException as e:  # a crash of one run must not end the worker
                print(f"worker: {type(e).__name__}: {e}", file=sys.stderr)
                rc = 3
            sys.stdout.flush()
            sys.stderr.flush()
        if not frozen:
            # What the first run imported (torch, the specs, the reference) lives as long as
            # this process: out of the collector's sight, every later full collection skips
            # it (a collection of the whole suite here: 1.4 s, 1.0 s with it frozen). Once
            # only: a later run's leftovers freed only after the next run would be kept.
            gc.freeze()
            frozen = True
        proto.write(json.dumps({"rc": rc}) + "\n")
    return 0


if __name__ == "__main__":
    code = main()
    # Every answer is sent. The interpreter's own teardown (torch, every spec module imported,
    # what the runs left) took about 1.6 s of the caller's wait here and frees nothing the
    # system won't: end without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
