"""Mutants: small, named breakages of the reference that the specs must notice.

A mutant is a list of exact source edits to files under `implementations/`, applied to a fresh copy
of the tree (never to the reference), plus the specs of the property it breaks. A harness mutant
edits files of the `torchlet/` package instead (its edits' paths start with `torchlet/`): it is
applied to a copy of that package, and the worker imports the edited subpackages and the specs
named anew from the copy for that run (spec/mutants/worker.py). The mutant is
*killed* when one of those specs fails against the copy, *survives* when they all pass. A survivor
is a hole in the specs: the property can break without any spec saying so.

Each module of this package declares `MUTANTS`, one per property or part. Every edit's `old`
text must occur exactly once in its file, so a mutant that no longer matches the reference fails
loudly instead of silently testing nothing.

Run them with `pytest -m mutants` (part of the suite), or one by hand:
`python -m spec.mutants run NAME` (`list` names them, `table` rewrites docs/mutants.md).
"""
from __future__ import annotations

import importlib
import pkgutil
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import implementations

REFERENCE = implementations.REFERENCE_ROOT
REPO = REFERENCE.parent
HARNESS = "torchlet"


@dataclass(frozen=True)
class Edit:
    file: str   # relative to implementations/, e.g. "v05_decode_lanes/kv.py"; or to the
    #             repository for a harness file, "torchlet/docs/draw.py"
    old: str    # exact text; must occur exactly once
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str                  # e.g. "v05-compacted-lanes"
    property: str              # the named property it breaks, e.g. "lane stability"
    edits: tuple[Edit, ...]
    specs: tuple[str, ...]     # pytest node ids or spec module paths: the property's specs
    versions: tuple[str, ...]  # short version ids whose parameters run, e.g. ("v05",); () for
    #                            a harness mutant's specs, which are not run per version
    why: str = ""              # what the breakage does, in one line

    @property
    def version(self) -> str:
        """The version whose source is mutated (the first edited file's)."""
        return self.edits[0].file.split("/")[0]

    @property
    def harness(self) -> bool:
        """It edits the harness (torchlet/), not a version."""
        return self.edits[0].file.startswith(HARNESS + "/")

    @property
    def fresh(self) -> list[str]:
        """A harness mutant's modules to import anew: the subpackages it edits, and its specs."""
        edited = {".".join(Path(e.file).parts[:2]).removesuffix(".py") for e in self.edits}
        specs = {s.split("::")[0].removesuffix(".py").replace("/", ".") for s in self.specs}
        return sorted(edited | specs)

    @property
    def markexpr(self) -> str:
        """`-m` over the versions' full names: `-k v07` would also match test_v07_*.py's v08 ids."""
        if not self.versions:
            return ""
        names = implementations.version_names()
        full = [next(n for n in names if n == v or n.split("_")[0] == v or n.startswith(v + "_"))
                for v in self.versions]
        return " or ".join(full)


def all_mutants() -> list[Mutant]:
    found: list[Mutant] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name in ("runner", "worker"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += getattr(module, "MUTANTS", [])
    names = [m.name for m in found]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"mutant names must be unique: {sorted(dupes)}"
    return found


def by_name(name: str) -> Mutant:
    for m in all_mutants():
        if m.name == name:
            return m
    raise KeyError(f"no mutant named {name!r}; `python -m spec.mutants list` names them")


class StaleMutant(AssertionError):
    """An edit whose text is not in the reference exactly once: the mutant must be updated."""


def apply(mutant: Mutant, dest: Path) -> Path:
    """Copy the reference tree to dest and apply the mutant's edits there. Returns dest. A
    harness mutant's dest is a copy of the torchlet package, edited."""
    if mutant.harness:
        shutil.copytree(REPO / HARNESS, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        dest = dest.parent  # the edits' paths start with torchlet/
    else:
        shutil.copytree(REFERENCE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for edit in mutant.edits:
        path = dest / edit.file
        source = path.read_text()
        count = source.count(edit.old)
        if count != 1:
            raise StaleMutant(f"mutant {mutant.name}: {edit.file} holds its text {count} times, "
                              f"not once:\n{edit.old}")
        path.write_text(source.replace(edit.old, edit.new))
    return dest / HARNESS if mutant.harness else dest
