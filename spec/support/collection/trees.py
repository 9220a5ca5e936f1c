"""A tree's versions, read once a process. `implementations.discover` lists the tree's directory
and looks up every version again on each call, and collection asks once a spec function (about
430 times a whole-suite collection, over half its time; spec/mutants' and spec/test_selection.py's
child runs collect again and again). A tree's versions do not change while a run reads them: a
mutant or a stub tree is a directory of its own, under a path of its own."""
from __future__ import annotations

import functools
from pathlib import Path

import implementations


@functools.lru_cache(maxsize=None)
def versions(root: Path = implementations.REFERENCE_ROOT) -> tuple[implementations.Version, ...]:
    return tuple(implementations.discover(root))


def names(root: Path = implementations.REFERENCE_ROOT) -> list[str]:
    return [v.name for v in versions(root)]
