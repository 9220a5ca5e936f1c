"""Mutants: small, named breakages of the reference that the specs must notice.

A mutant is a list of exact source edits to files under `implementations/`, applied to a fresh copy
of the tree (never to the reference), plus the specs of the property it breaks. A harness mutant
edits files of the `torchlet/` package instead (its edits' paths start with `torchlet/`): it is
applied to a copy of that package, and the worker imports the edited subpackages and the specs
named anew from the copy for that run (spec/mutants/worker.py). A mutant of the specs' own
machinery edits a file of spec/support/ (the collection rule) the same way: the worker imports
the edited module anew from the copy. A reference mutant (`reference=True`) edits versions like
any other, for specs that read the reference tree itself (its files, its packages by the name
`implementations`: spec/test_layout.py, spec/test_part_protocols.py) rather than the tree
`--impl-root` names: for its run the copy is imported as `implementations`. The mutant is
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
SUPPORT = "spec/support"  # the specs' machinery: a mutant of it is run like a harness mutant


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
    reference: bool = False    # its specs read implementations/ itself, not --impl-root's tree:
    #                            the copy stands in for the reference package for its run. Its
    #                            specs must not import v09 on (their kernels' torch ops are
    #                            named after the module: a second import registers them twice)

    @property
    def version(self) -> str:
        """The version whose source is mutated (the first edited file's)."""
        return self.edits[0].file.split("/")[0]

    @property
    def harness(self) -> bool:
        """It edits the harness (torchlet/) or the specs' machinery (spec/support/), not a
        version."""
        return self.edits[0].file.startswith((HARNESS + "/", SUPPORT + "/"))

    @property
    def fresh(self) -> list[str]:
        """A harness or reference mutant's modules to import anew: the torchlet subpackages or
        spec/support modules it edits (`implementations` for a reference mutant), and its
        specs."""
        if self.reference:
            edited = {"implementations"}
        else:
            edited = {".".join(Path(e.file).parts[:2] if e.file.startswith(HARNESS + "/")
                               else Path(e.file).parts).removesuffix(".py") for e in self.edits}
        specs = {s.split("::")[0].removesuffix(".py").replace("/", ".") for s in self.specs}
        return sorted(edited | specs)

    @property
    def unused_versions(self) -> list[str]:
        """Versions after the last one a version's mutant names, left out of its copy: none of
        its specs runs against them (its -m selects only the versions it names), and what the rule
        decides for a version reads that version and earlier ones alone. Each costs an import
        at every run's collection (a v00 mutant's copy: 20 versions, about 0.15 s). A reference
        mutant's specs read the whole tree, and a harness mutant's copy holds no versions."""
        if self.reference or not self.versions:
            return []
        names = implementations.version_names()
        last = max(names.index(n) for n in self.markexpr.split(" or "))
        return names[last + 1:]

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
    """Copy the reference tree to dest and apply the mutant's edits there. Returns the copy: dest
    for a version's mutant; for a harness mutant, dest's folder, which holds the copy of what it
    edits (dest itself the torchlet package's, dest.parent/spec/support the specs' machinery's),
    the folder the worker imports the edited modules from."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    if mutant.harness:
        for top in sorted({HARNESS if e.file.startswith(HARNESS + "/") else SUPPORT
                           for e in mutant.edits}):
            shutil.copytree(REPO / top, dest.parent / top, ignore=ignore)
        dest = dest.parent  # the edits' paths start with torchlet/ or spec/support/
    else:
        shutil.copytree(REFERENCE, dest, ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", *mutant.unused_versions))
    for edit in mutant.edits:
        path = dest / edit.file
        source = path.read_text()
        count = source.count(edit.old)
        if count != 1:
            raise StaleMutant(f"mutant {mutant.name}: {edit.file} holds its text {count} times, "
                              f"not once:\n{edit.old}")
        path.write_text(source.replace(edit.old, edit.new))
    return dest
