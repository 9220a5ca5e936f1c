"""Where the CPU specs run Triton kernels: under the interpreter only for the pages of the
versions that write kernels (test_v09_*, test_v10_*, test_v13_*: kernels, and the engine running
on them), each against its own version, and the `kernels` specs of other pages, run
against a version that writes kernels itself. A `kernel_path` spec tests a version's own
code that runs only on the kernel path (v15's slice graphs) and runs there under the interpreter,
whichever version it is. Every other
spec runs the layers' PyTorch path: the inherited specs of v09 and v10 (v00's parity, v05's lanes, v08's pool, ...), and every spec
of a later version, which calls those same kernels unchanged. Shared objects are tested once:
the kernels by the specs written for them, and on a GPU by every spec of every version (GPU
specs run compiled kernels everywhere). The interpreter costs about a minute of suite time per
version that runs it; no mutant of v09 or v10 is killed by an inherited spec.

The rule (rule.py) makes the choice once a (spec, version) at collection, from `kernels=True`
and `kernel_path=True` of a spec's marker; before each spec TRITON_INTERPRET is set to it, "1"
or "0" (an engine's layers read it when the engine is built: v09's kernels_take,
TritonOps.for_device). A `kernels` spec needs the kernels to run on CPU and is skipped for a
version that only inherits them.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import torch

from spec.support.inputs.kernel_targets import INTERPRETED

ON_GPU = torch.cuda.is_available()
NOT_ON_CPU = ("runs the kernels on CPU under TRITON_INTERPRET=1 (a GPU spec covers the same code "
              "on CUDA)")


@functools.lru_cache(maxsize=None)
def _writes_triton(package_dir: str) -> bool:
    return any("@triton.jit" in p.read_text() for p in Path(package_dir).glob("*.py"))


def writes_triton(version) -> bool:
    """Whether the version's own files hold Triton kernels."""
    return _writes_triton(str(Path(version.package.__file__).parent))


PAGE = re.compile(r"^test_(v\d\d(?:_\d)?)_")


@functools.lru_cache(maxsize=None)
def _page_writes_triton(page: str, tree: str) -> bool:
    import implementations

    try:
        return writes_triton(implementations.load(page, Path(tree)))
    except Exception:  # noqa: BLE001  (a page of a version this tree lacks: none of its kernels)
        return False


def page_writes_triton(page: str, impl) -> bool:
    """Whether the spec module `page` (a file name) is the page of a version that writes
    kernels."""
    match = PAGE.match(page)
    tree = str(Path(impl.package.__file__).parent.parent)
    return bool(match) and _page_writes_triton(match.group(1), tree)


def foreign_kernel_page(page: str, impl) -> bool:
    """Whether the page is that of an earlier version that writes kernels: a later version that
    writes kernels of its own (v10, v13) still calls those unchanged."""
    match = PAGE.match(page)
    return (bool(match) and not impl.name.startswith(match.group(1) + "_")
            and page_writes_triton(page, impl))


def choose(impl, page: str, kernels: bool, kernel_path: bool) -> tuple[bool | None, str | None]:
    """(interpret: whether TRITON_INTERPRET is 1 for the spec, None to leave it as the process
    has it; the reason it skips, or None) for a spec of this page against impl."""
    if kernel_path:
        # The version's own code on its kernel path, on CPU: what it tests runs nowhere else.
        return (None, NOT_ON_CPU) if ON_GPU or not INTERPRETED else (True, None)
    if ON_GPU or not INTERPRETED:
        return None, None
    own = impl is None or not impl.uses_triton or writes_triton(impl)
    if own and impl is not None and impl.uses_triton and foreign_kernel_page(page, impl):
        own = False  # another kernel-writing version's page: its kernels, not this version's
    interpret = impl is None or not impl.uses_triton or (
        own and (kernels or page_writes_triton(page, impl)))
    if not own and kernels:
        return interpret, (f"{impl.name} runs its predecessors' Triton kernels unchanged: on CPU "
                           f"they are checked with the versions that write them (on a GPU, here "
                           f"too)")
    return interpret, None


def set_interpreter(interpret: bool | None) -> None:
    if interpret is not None:
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
