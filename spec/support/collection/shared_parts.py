"""Shared objects are tested once. A page whose specs exercise a part directly (a block pool, a
cache), not an engine, runs against the first version that exports that very object; a later
version that re-exports it unchanged skips them, naming the version they ran against. A version
that replaces the part (v12's pool over v08's) exports another object, and runs them.

The same holds for a version whose idea is kernels alone (v09, v10: their capability adds
Triton kernels and nothing else): its engine, runner, pool and scheduler are v08's very
objects, and on a CPU its inherited specs run the layers' PyTorch path, which is v08's
(spec/support/collection/kernel_mode.py). The properties that drive those engine parts over random
schedules (marked `engine_parts`) would run v08's code again there: on a CPU they skip such a
version, naming the one they ran against. Its parity specs still run (they see the PyTorch path
its layers fall back to), and on a GPU, where its kernels run, everything does.

Where versions declare recipes (PARTS), the pages marked with a part (`pytest.mark.part`) are
left out for a version that takes the part unchanged before they run (spec/support/collection/parts.py);
the skips here stay for what a recipe does not say: an object re-exported within a part the
version does write, and a tree without recipes."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchlet.contract import TRITON_BASICS, TRITON_PAGED
from spec.support.collection import trees
from spec.support.collection.selection import impl_of

KERNELS_ALONE = (TRITON_BASICS, TRITON_PAGED)  # capabilities whose idea is Triton kernels alone


def skip_unless_first_with(impl, *names: str) -> None:
    """Skip unless impl is the first version of its tree to export these objects."""
    parts = [getattr(impl.package, n) for n in names]
    tree = Path(impl.package.__file__).resolve().parent.parent
    for version in trees.versions(tree):
        if all(getattr(version.package, n, None) is p for n, p in zip(names, parts)):
            if version.name != impl.name:
                pytest.skip(f"{impl.name} exports {version.name}'s {', '.join(names)} unchanged: "
                            f"these specs ran against {version.name}")
            return


def engine_source(impl) -> str | None:
    """On a CPU, the version whose engine code impl's runs, where impl adds kernels alone (the
    last version before it that does not); None where impl runs code of its own."""
    if torch.cuda.is_available() or impl.capabilities[-1] not in KERNELS_ALONE:
        return None
    tree = Path(impl.package.__file__).resolve().parent.parent
    source = None
    for version in trees.versions(tree):
        if version.name == impl.name:
            return source
        if version.capabilities[-1] not in KERNELS_ALONE:
            source = version.name
    return None


def before(item) -> None:
    impl = impl_of(item)
    if impl is None or item.get_closest_marker("engine_parts") is None:
        return
    source = engine_source(impl)
    if source is not None:
        pytest.skip(f"{impl.name} adds kernels alone; on a CPU its engine parts and layers are "
                    f"{source}'s, and this property ran against {source}")
