"""Where the CPU specs run Triton kernels: under the interpreter only for the pages of the
versions that write kernels (test_v09_*, test_v10_*, test_v13_*: kernels, and the engine running
on them), each against its own version, and the specs marked `kernels` of other pages, run
against a version that writes kernels itself. A spec marked `kernel_path` tests a version's own
code that runs only on the kernel path (v15's slice graphs) and runs there under the interpreter,
whichever version it is. Every other
spec runs the layers' PyTorch path: the inherited specs of v09 and v10 (v00's parity, v05's lanes, v08's pool, ...), and every spec
of a later version, which calls those same kernels unchanged. Shared objects are tested once:
the kernels by the specs written for them, and on a GPU by every spec of every version (GPU
specs run compiled kernels everywhere). The interpreter costs about a minute of suite time per
version that runs it; no mutant of v09 or v10 is killed by an inherited spec.

Before each spec that runs against a version, TRITON_INTERPRET is set for it, "1" or "0" (an
engine's layers read it when the engine is built: v09's kernels_take, TritonOps.for_device). A
spec marked `kernels` needs the kernels to run on CPU and is skipped for a version that only
inherits them.
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest
import torch

from spec.support.inputs.kernel_targets import INTERPRETED
from spec.support.collection.selection import impl_of


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


def page_writes_triton(item, impl) -> bool:
    """Whether the item's spec module is the page of a version that writes kernels."""
    match = PAGE.match(Path(str(item.fspath)).name)
    tree = str(Path(impl.package.__file__).parent.parent)
    return bool(match) and _page_writes_triton(match.group(1), tree)


def before(item) -> None:
    """Set the interpreter for the item's version; skip a `kernels` spec of a version that only
    inherits its Triton kernels (versions without Triton run their own PyTorch ones)."""
    if item.get_closest_marker("kernel_path") is not None:
        # The version's own code on its kernel path, on CPU: what it tests runs nowhere else.
        if torch.cuda.is_available() or not INTERPRETED:
            pytest.skip("runs the kernels on CPU under TRITON_INTERPRET=1 (a GPU spec covers "
                        "the same code on CUDA)")
        os.environ["TRITON_INTERPRET"] = "1"
        return
    if torch.cuda.is_available() or not INTERPRETED:
        return
    impl = impl_of(item)
    own = impl is None or not impl.uses_triton or writes_triton(impl)
    kernels = item.get_closest_marker("kernels") is not None
    if own and impl is not None and impl.uses_triton and foreign_kernel_page(item, impl):
        own = False  # another kernel-writing version's page: its kernels, not this version's
    interpret = impl is None or not impl.uses_triton or (
        own and (kernels or page_writes_triton(item, impl)))
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    if not own and kernels:
        pytest.skip(f"{impl.name} runs its predecessors' Triton kernels unchanged: on CPU they "
                    f"are checked with the versions that write them (on a GPU, here too)")


def foreign_kernel_page(item, impl) -> bool:
    """Whether the item's page is that of an earlier version that writes kernels: a later
    version that writes kernels of its own (v10, v13) still calls those unchanged."""
    match = PAGE.match(Path(str(item.fspath)).name)
    return (bool(match) and not impl.name.startswith(match.group(1) + "_")
            and page_writes_triton(item, impl))
