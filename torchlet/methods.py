"""The method-level compare: for each part that two versions' recipes hold differently, which
methods the newer one brings and which of the older one's each takes the place of.

Read from the recipes (PARTS), not the files: a part is a class, an object or a module, and what
it runs is its methods, found with `inspect`. A part's components are itself and the classes its
class-level public attributes name (v08's decoder composes `ops` and `Memory`, swapped on their
own from v09 on), found again in each of those; a name an earlier one holds hides a later one's,
as the decoder's lookup does. A method the newer part runs that the older one runs too (the same
function object) is unchanged and not shown; the others are paired:
- with the older part's method of the same name (an override, or the same name in a class that
  took the older one's place);
- else with the older method it supersedes: one the newer part no longer runs, whose calls a
  paired method of either version (any part's) now makes to it instead, on the lines that took
  the calling line's place (v04's runner called kv.allocate where v05's calls kv.place);
- else shown alone, as an addition.
Methods the older part runs and the newer one no longer does, paired with none, are named.

Two readers: the docs site's compare pages (torchlet/docs/site.py) and `torchlet diff`'s method
view (torchlet/learner.py); it lies below both, as the docs site imports the learner's module."""
from __future__ import annotations

import ast
import difflib
import functools
import inspect
import re
import textwrap
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchlet.contract import PART_NAMES

SHORT = re.compile(r"^v\d\d(?:_\d(?=_))?")  # v01_0_ragged_batch -> v01_0, v02_kv_cache -> v02


@dataclass(frozen=True)
class Method:
    version: str      # the version whose file defines it ("v05_decode_lanes"), else its module
    owner: str        # the class (or module) it is defined in: "LaneInputs"
    name: str
    file: str         # relative to the tree: "v05_decode_lanes/inputs.py"
    line: int
    lines: tuple[str, ...]

    @property
    def short(self) -> str:
        m = SHORT.match(self.version)
        return m.group(0) if m else self.version

    @property
    def qualname(self) -> str:
        return f"{self.owner}.{self.name}"


@dataclass
class Pairing:
    new: Method           # what the newer part runs
    old: Method | None    # what it takes the place of; None: an addition


@dataclass
class PartChange:
    part: str
    old_label: str        # what the part is on each side ("" where a recipe lacks it)
    new_label: str
    pairings: list[Pairing] = field(default_factory=list)
    gone: list[Method] = field(default_factory=list)


def _function(value: Any):
    """The function behind a class attribute: a method, a class or static method, a property's
    getter, a cached property's function; None for anything else."""
    if isinstance(value, (classmethod, staticmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    elif hasattr(value, "func") and type(value).__name__ == "cached_property":
        value = value.func
    return value if inspect.isfunction(value) else None


def _in_tree(obj: Any, tree: str) -> bool:
    """A class or module of the tree of versions (a part's own, not torch's or the stdlib's)."""
    name = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", "")
    return (name or "").split(".")[0] == tree


def components(part: Any, tree: str) -> list[Any]:
    """The part's class (or module), then the classes and modules its class-level public
    attributes name (the tree's own, or the classes of the tree's objects), and theirs, each
    once."""
    start = part if isinstance(part, (type, types.ModuleType)) else type(part)
    found, todo = [], [start]
    while todo:
        cls = todo.pop(0)
        if cls in found:
            continue
        found.append(cls)
        if not isinstance(cls, type):
            continue
        for name in sorted(n for n in dir(cls) if not n.startswith("_")):
            # the instance's own choice of component where it made one (layers.ops = ...);
            # static, so that reading a part runs none of its properties
            value = inspect.getattr_static(part if cls is start else cls, name)
            kind = value if isinstance(value, (type, types.ModuleType)) else type(value)
            if _function(value) is None and _in_tree(kind, tree) and kind not in found:
                todo.append(kind)
    return found


@functools.lru_cache(maxsize=None)
def _source(fn) -> tuple[list[str], int, Path] | None:
    """A function's lines, first line number and file, read once per build (a method shows in
    every pair whose parts differ around it); None without readable source."""
    try:
        lines, line = inspect.getsourcelines(fn)
        return lines, line, Path(inspect.getsourcefile(fn) or "").resolve()
    except (OSError, TypeError):
        return None


@functools.lru_cache(maxsize=None)
def _method(fn, owner: str, root: Path) -> Method | None:
    """None for a function without readable source (a dataclass's generated __init__)."""
    found = _source(inspect.unwrap(fn))  # a decorated method's own source, not its decorator's
    if found is None:
        return None
    lines, line, path = found
    fn = inspect.unwrap(fn)
    root = Path(root).resolve()
    if path.is_relative_to(root):
        rel = path.relative_to(root)
        version, file = rel.parts[0], str(rel)
    else:
        version, file = fn.__module__, fn.__module__
    return Method(version, owner, fn.__name__, file, line,
                  tuple(textwrap.dedent("".join(lines)).splitlines()))


def _forwards(fn) -> bool:
    """Whether a method only hands its call on to the same-named member of one of its object's
    components (a decoder's `rms_norm` returning `self.ops.rms_norm(...)`): plumbing, so the
    component's own method is shown too, not hidden by it."""
    found = _source(inspect.unwrap(fn))
    if found is None:
        return False
    try:
        node = ast.parse(textwrap.dedent("".join(found[0]))).body[0]
    except (SyntaxError, IndexError):
        return False
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return False
    value = body[0].value.func if isinstance(body[0].value, ast.Call) else body[0].value
    return (isinstance(value, ast.Attribute) and value.attr == fn.__name__
            and isinstance(value.value, ast.Attribute) and isinstance(value.value.value, ast.Name)
            and value.value.value.id == "self")


def methods_of(part: Any, root: Path, tree: str) -> dict[Any, Method]:
    """function -> Method, for every method the part's components run (through their MROs),
    the first component's where two hold one name."""
    found: dict[Any, Method] = {}
    taken: set[str] = set()  # a name an earlier component holds hides a later one's
    for comp in components(part, tree):
        if isinstance(comp, types.ModuleType):
            pairs = [(n, v, comp.__name__.rsplit(".", 1)[-1]) for n, v in vars(comp).items()
                     if inspect.isfunction(v) and v.__module__ == comp.__name__]
        else:
            pairs = []
            for klass in reversed(comp.__mro__[:-1]):  # object's methods are no one's idea
                pairs += [(n, _function(v), klass.__name__) for n, v in vars(klass).items()]
            latest = {n: (fn, owner) for n, fn, owner in pairs if fn is not None}
            pairs = [(n, fn, owner) for n, (fn, owner) in latest.items()]
        held = {name for name, fn, _ in pairs if not _forwards(fn)}
        for name, fn, owner in pairs:
            if name.startswith("__") and name != "__init__" or fn in found or name in taken:
                continue
            method = _method(fn, owner, root)
            if method is not None:
                found[fn] = method
        taken |= held
    return found


CALL = re.compile(r"\b(\w+)\(")


def _calls(line: str) -> set[str]:
    return set(CALL.findall(line))


def superseding(callers: list[Pairing]) -> dict[str, list[str]]:
    """older method name -> the names that took its calls' place: where a paired caller's lines
    changed, a line that called the older method became lines that call the others, nearest
    first (the calls from the base part's code are how a reader finds the new name)."""
    found: dict[str, list[str]] = {}
    for p in callers:
        if p.old is None:
            continue
        a, b = p.old.lines, p.new.lines
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b,
                                                            autojunk=False).get_opcodes():
            if tag != "replace":
                continue
            calls = [_calls(line) for line in b[j1:j2]]
            called = set().union(*calls)
            for i in range(i1, i2):
                before = _calls(a[i])
                for name in sorted(before - called):
                    near = sorted(range(j2 - j1), key=lambda j: (abs(j - (i - i1)), j))
                    found.setdefault(name, []).extend(
                        n for j in near for n in sorted(calls[j] - before))
    return found


def pair_methods(old: dict[Any, Method], new: dict[Any, Method],
                 callers: list[Pairing] | None = None) -> tuple[list[Pairing], list[Method]]:
    """(the pairings of the newer part's changed methods, the older ones paired with none).
    callers: the pairings of every part of the two versions, whose changed calls show which
    differently named method supersedes which (the first pass leaves it None: same names)."""
    added = [m for fn, m in new.items() if fn not in old]
    left = [m for fn, m in old.items() if fn not in new]
    pairings: dict[Method, Pairing] = {}
    for m in added:
        same = next((o for o in left if o.name == m.name), None)
        if same is not None:
            pairings[m] = Pairing(m, same)
            left.remove(same)
    took = superseding(callers or []) if left and callers else {}
    for o in list(left):
        free = {m.name: m for m in added if m not in pairings}
        name = next((n for n in took.get(o.name, ()) if n in free), None)
        if name is not None:
            pairings[free[name]] = Pairing(free[name], o)
            left.remove(o)
    return [pairings.get(m, Pairing(m, None)) for m in added], left


def as_text(changes: list[PartChange]) -> str:
    """The method view as `torchlet diff` prints it: per part, each method against the one it
    takes the place of as a unified diff (a new one whole), then the methods no longer run."""
    def label(m: Method) -> str:
        return f"{m.short}'s {m.qualname} ({m.file}:{m.line})"

    out = []
    for c in changes:
        was = f"{c.old_label} -> " if c.old_label else "new: "
        out.append(f"== {c.part}: {was}{c.new_label}\n")
        for p in c.pairings:
            old = [line + "\n" for line in p.old.lines] if p.old else []
            out.extend(difflib.unified_diff(old, [line + "\n" for line in p.new.lines],
                                            label(p.old) if p.old else "/dev/null", label(p.new)))
        if c.gone:
            out.append("no longer run by the part: " + ", ".join(map(label, c.gone)) + "\n")
    return "".join(out)


def part_changes(old_version, new_version, root: Path) -> list[PartChange]:
    """For each part (in assembly order) the two recipes hold differently, its pairings."""
    old_recipe, new_recipe = old_version.recipe, new_version.recipe
    if old_recipe is None or new_recipe is None:
        return []
    tree = new_version.package.__name__.split(".")[0]
    labels = [{name: label for name, label, _ in r.table()} for r in (old_recipe, new_recipe)]
    changes = []
    for name in PART_NAMES:
        a, b = old_recipe.parts.get(name), new_recipe.parts.get(name)
        if a is b or b is None:
            continue
        old = methods_of(a, root, tree) if a is not None else {}
        changes.append((name, a, b, old, methods_of(b, root, tree)))
    first = [p for *_, old, new in changes for p in pair_methods(old, new)[0]]
    return [PartChange(name, labels[0].get(name, ""), labels[1][name],
                       *pair_methods(old, new, first)) for name, a, b, old, new in changes]


def method_changes(a: str, b: str, root: Path) -> tuple[list | None, str]:
    """(the part changes between two versions' recipes, ""), or (None, why) where a version's
    package cannot be imported here (a learner's stub, Triton missing)."""
    import implementations

    try:
        return part_changes(implementations.load(a, root), implementations.load(b, root),
                                    root), ""
    except Exception as e:  # noqa: BLE001  (the page says why, in one line)
        return None, f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
