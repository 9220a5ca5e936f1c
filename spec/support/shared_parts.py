"""Shared objects are tested once. A page whose specs exercise a part directly (a block pool, a
cache), not an engine, runs against the first version that exports that very object; a later
version that re-exports it unchanged skips them, naming the version they ran against. A version
that replaces the part (v12's pool over v08's) exports another object, and runs them."""
from __future__ import annotations

from pathlib import Path

import pytest

import implementations


def skip_unless_first_with(impl, *names: str) -> None:
    """Skip unless impl is the first version of its tree to export these objects."""
    parts = [getattr(impl.package, n) for n in names]
    tree = Path(impl.package.__file__).resolve().parent.parent
    for version in implementations.discover(tree):
        if all(getattr(version.package, n, None) is p for n, p in zip(names, parts)):
            if version.name != impl.name:
                pytest.skip(f"{impl.name} exports {version.name}'s {', '.join(names)} unchanged: "
                            f"these specs ran against {version.name}")
            return
