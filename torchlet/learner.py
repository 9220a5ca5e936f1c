"""Learner mode: exercise trees generated from the reference, checked by the version's own specs.

`torchlet exercise vNN DIR` writes a tree of versions whose vNN modules keep every signature and
docstring but raise NotImplementedError in every body. The stubs are cut out of the reference
source by `ast` positions each time, so they never drift from it. `torchlet check DIR` runs vNN's
spec modules against the tree, says which function to write next and lists the other stubs left
in the order the specs need them; `torchlet diff vA vB` shows what changes between two versions,
method by method as the docs site's compare does (`--files`: the whole files).
"""
from __future__ import annotations

import argparse
import ast
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from implementations import REFERENCE_ROOT, VERSION_DIR, version_names
from torchlet.contract import TorchletError, UnknownVersionError
from torchlet.methods import as_text, method_changes

REPO = Path(__file__).resolve().parents[1]
SPEC_DIR = REPO / "spec"
DEFAULT_RESULTS = REPO / "build" / "junit.xml"  # where the README's test command leaves it
SPEC_FILE = re.compile(r"^test_v(\d\d)(?:_(\d)(?=_|$))?(?:_\w*)?\.py$")
ROOT_INIT = '"""A learner\'s tree of Torchlet versions (see docs/learners.md)."""\n'
# The stub message starts with this, so that check() can read it back out of a failure.
STUB_MESSAGE = re.compile(r"(v\d\d\w*): implement ([\w.]+) \(")
# A spec stopped by check's time limit fails with this (torchlet/spec_timeout.py writes it).
TIMEOUT_MESSAGE = re.compile(r"(v\d\d\w*): ([\w.<>]+) did not return in ([\d.]+) s \(it was at "
                             r"(.+?:\d+)\)")
# Every version directory exercise writes holds this file: --force replaces only those, never a
# reference version or a copy of one.
MARK = ".torchlet-exercise"
# check's limit on each spec phase (setup, call, teardown). The slowest single phase of any
# version's own specs took 12.5 s on the 2-core CPU machine, shared (v13's packed path in the
# Triton interpreter; v16's rank start-up 11.2 s): 60 s leaves 5x for load and for a learner's
# slower but right code, and an endless loop is still named within a minute. --timeout changes it.
DEFAULT_TIMEOUT = 60.0


# ---------------------------------------------------------------- versions and their specs

def resolve(name: str, root: Path = REFERENCE_ROOT) -> str:
    """The full directory name of a version: `v00`, `v01_0` and `v01_0_ragged_batch` all work."""
    names = version_names(root)
    if name in names:
        return name
    matches = [n for n in names if n.split("_")[0] == name or n.startswith(name + "_")]
    if len(matches) != 1:
        raise UnknownVersionError(f"unknown version {name!r}; known versions: {', '.join(names)}")
    return matches[0]


def _number(name: str) -> tuple[str, str | None]:
    major, minor = VERSION_DIR.match(name).groups()
    return major, minor


def spec_modules(version: str, spec_dir: Path = SPEC_DIR,
                 root: Path = REFERENCE_ROOT) -> list[Path]:
    """The version's own spec modules, spec/test_vNN_*.py by convention.

    `test_v01_0_x.py` belongs to v01_0; `test_v01_x.py` to the only v01 version, or, when there are
    several, to the one whose idea (`ragged_batch`) its name contains."""
    major, minor = _number(version)
    siblings = [n for n in version_names(root) if _number(n)[0] == major]
    idea = version.split("_", 2 if minor is not None else 1)[-1]
    found = []
    for path in sorted(Path(spec_dir).glob("test_v*.py")):
        m = SPEC_FILE.match(path.name)
        if not m or m.group(1) != major:
            continue
        if m.group(2) is not None:
            mine = m.group(2) == (minor or "0")
        else:
            mine = len(siblings) == 1 or idea in path.stem
        if mine:
            found.append(path)
    return found


def _spec_names(specs: list[Path]) -> list[str]:
    return [f"spec/{p.name}" for p in specs]


# ---------------------------------------------------------------- stubs

def functions(body: list[ast.stmt], prefix: str = ""):
    """(qualname, node) of every function and method, in source order; not nested functions."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from functions(node.body, f"{prefix}{node.name}.")
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from functions(getattr(node, block, []), prefix)
            for handler in getattr(node, "handlers", []):
                yield from functions(handler.body, prefix)


def _docstring_node(node) -> ast.stmt | None:
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        return first
    return None


def specs_naming(qualname: str, specs: list[Path]) -> list[str]:
    """The spec modules that name the function; all of them when none does (a method or a
    helper the specs reach only through the engine)."""
    word = re.compile(rf"\b{re.escape(qualname.split('.')[-1])}\b")
    naming = [p for p in specs if word.search(p.read_text())]
    return _spec_names(naming or specs)


def stub_message(version: str, module: str, qualname: str, specs: list[str]) -> str:
    checked = f"checked by {', '.join(specs)}" if specs else "no spec module checks it yet"
    return f"{version}: implement {module}.{qualname} ({checked})"


def _raise_text(message: str, indent: int | None) -> str:
    """`raise NotImplementedError("...")`, the message split over two lines where the statement
    starts its own line."""
    def quote(text: str) -> str:
        return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)

    head, sep, tail = message.partition(" (")
    if indent is None or not sep:
        return f"raise NotImplementedError({quote(message)})"
    pad = " " * (indent + 4)
    return f"raise NotImplementedError(\n{pad}{quote(head + ' ')}\n{pad}{quote(sep[1:] + tail)})"


def stub_source(source: str, version: str, module: str, specs: list[Path]) -> str:
    """The module with each function body cut down to its docstring and a raise.

    Edits are made on the source text at the positions `ast` gives (byte offsets), so imports,
    classes, constants and comments outside bodies stay as the reference wrote them."""
    data = source.encode()
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(line: int, col: int) -> int:
        return starts[line - 1] + col

    def own_line(stmt) -> bool:
        return not data[starts[stmt.lineno - 1]:offset(stmt.lineno, stmt.col_offset)].strip()

    edits = []
    for qualname, node in functions(ast.parse(source).body):
        doc = _docstring_node(node)
        rest = node.body[1:] if doc else node.body
        anchor = rest[0] if rest else doc
        message = stub_message(version, module, qualname, specs_naming(qualname, specs))
        raise_stmt = _raise_text(message, anchor.col_offset if own_line(anchor) else None)
        if rest:
            begin = offset(rest[0].lineno, rest[0].col_offset)
            end = offset(rest[-1].end_lineno, rest[-1].end_col_offset)
            tail = data[end:starts[rest[-1].end_lineno]]
            if tail.strip().startswith(b"#"):  # a comment on the last line spoke of the old code
                end += len(tail.rstrip(b"\r\n"))
            edits.append((begin, end, raise_stmt))
        else:
            at = offset(doc.end_lineno, doc.end_col_offset)
            sep = "\n" + " " * doc.col_offset if own_line(doc) else "; "
            edits.append((at, at, sep + raise_stmt))
    for begin, end, text in sorted(edits, reverse=True):
        data = data[:begin] + text.encode() + data[end:]
    out = data.decode()
    compile(out, f"<stub of {module}>", "exec")  # a broken cut fails here, not in a learner's run
    return out


class LearnerSyntaxError(TorchletError):
    """A module of a learner's tree that Python can't parse; its text is `FILE:LINE: message`,
    the form editors jump from."""


def parse(path: Path) -> ast.Module:
    """The module's syntax tree, or a LearnerSyntaxError naming its file and line."""
    try:
        return ast.parse(Path(path).read_bytes(), filename=str(path))
    except (SyntaxError, ValueError) as e:  # ValueError: a null byte, before Python 3.12
        line = getattr(e, "lineno", None) or 1
        raise LearnerSyntaxError(f"{path}:{line}: {getattr(e, 'msg', None) or e}") from None


def remaining_stubs(path: Path) -> list[str]:
    """Qualnames in a module file whose body is still one of our stubs."""
    return _stubs_in(parse(path))


def remaining_stubs_in(source: str) -> list[str]:
    return _stubs_in(ast.parse(source))


def _stubs_in(tree: ast.Module) -> list[str]:
    left = []
    for qualname, node in functions(tree.body):
        body = node.body[1:] if _docstring_node(node) else node.body
        if len(body) == 1 and isinstance(body[0], ast.Raise) and isinstance(body[0].exc, ast.Call):
            call = body[0].exc
            if getattr(call.func, "id", None) == "NotImplementedError" and call.args \
                    and isinstance(call.args[0], ast.Constant) \
                    and STUB_MESSAGE.match(str(call.args[0].value)):
                left.append(qualname)
    return left


def module_name(version_dir: Path, path: Path) -> str:
    return ".".join(path.relative_to(version_dir).with_suffix("").parts)


def _relative_imports(path: Path) -> set[str]:
    """Sibling modules a module imports with `from .x import` or `from . import x`."""
    found = set()
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module)
            else:
                found.update(a.name for a in node.names)
    return found


def modules_in_order(version_dir: Path) -> list[Path]:
    """A version's modules, each after the sibling modules it imports (then by name): the order
    in which a learner can write them and see them work."""
    paths = sorted(Path(version_dir).rglob("*.py"))
    names = {module_name(version_dir, p): p for p in paths}
    ordered, seen = [], set()

    def visit(name, trail=()):
        if name in seen or name in trail or name not in names:
            return
        for dep in sorted(_relative_imports(names[name])):
            visit(dep, trail + (name,))
        seen.add(name)
        ordered.append(names[name])

    for name in sorted(names, key=lambda n: (n == "__init__", n)):
        visit(name)
    return ordered


def function_files(version_dir: Path) -> dict[str, Path]:
    """`module.qualname` of every function of a version, in the order to write them, and the
    file it is in."""
    return {f"{module_name(version_dir, p)}.{q}": p for p in modules_in_order(version_dir)
            for q, _ in functions(parse(p).body)}


def functions_in_order(version_dir: Path) -> list[str]:
    return list(function_files(version_dir))


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def calls(version_dir: Path) -> dict[str, list[str]]:
    """`module.qualname` -> the version's functions its body calls, in source order.

    Read by name: `f(...)`, `x.f(...)`, and `C(...)` for `C.__init__`; a name calls the function
    of that name in the same module where there is one, else every function of that name in the
    version (a method reached through `self` of a subclass, say)."""
    defs = [(module_name(version_dir, p), q, node) for p in modules_in_order(version_dir)
            for q, node in functions(parse(p).body)]
    named: dict[str, list[tuple[str, str]]] = {}
    for module, q, _ in defs:
        parts = q.split(".")
        for name in {parts[-1], *(parts[-2:-1] if parts[-1] == "__init__" else [])}:
            named.setdefault(name, []).append((module, f"{module}.{q}"))
    graph = {}
    for module, q, node in defs:
        found = sorted((n for n in ast.walk(node) if isinstance(n, ast.Call)),
                       key=lambda n: (n.lineno, n.col_offset))
        callees = []
        for call in found:
            targets = named.get(_called_name(call), [])
            same = [full for m, full in targets if m == module]
            callees += [full for full in same or [full for _, full in targets]
                        if full not in callees]
        graph[f"{module}.{q}"] = callees
    return graph


def need_order(left: list[str], reached: list[str], graph: dict[str, list[str]]) -> list[str]:
    """The stubs `left`, in the order the specs need them: each stub a failing spec `reached`,
    followed by the stubs its reference body calls (they fail next once it is written), then the
    stubs no spec reaches yet, in the order to write them, each followed the same way."""
    stubs, seen, order = set(left), set(), []

    def visit(name):
        if name in seen:
            return
        seen.add(name)
        if name in stubs:
            order.append(name)
        for callee in graph.get(name, ()):
            visit(callee)

    for name in [*reached, *left]:
        visit(name)
    return order


# ---------------------------------------------------------------- exercise trees

class ExerciseError(TorchletError):
    """An exercise tree that can't be written without losing the learner's work."""


@dataclass
class Exercise:
    root: Path
    version: str
    specs: list[str]
    stubbed: list[str]                       # module.qualname of each stub written
    sources: dict[str, str] = field(default_factory=dict)  # earlier version -> where it came from


def _copy_version(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def stubs_left(version_dir: Path) -> list[str]:
    """`module.qualname` of every function of the version that is still a stub."""
    version_dir = Path(version_dir)
    if not version_dir.is_dir():
        return []
    return [f"{module_name(version_dir, p)}.{q}" for p in modules_in_order(version_dir)
            for q in remaining_stubs(p)]


def is_done(version_dir: Path) -> bool:
    return not stubs_left(version_dir)


def _mark(version_dir: Path, how: str) -> None:
    (version_dir / MARK).write_text(f"{version_dir.name}: written by `torchlet exercise` ({how}); "
                                    f"`--force` may replace this directory.\n")


def _refuse_foreign(dest: Path, reference_root: Path) -> None:
    """Refuse a tree exercise must not write into: a file; the project's reference versions, a
    tree inside them or around them; a tree holding a version directory exercise did not write
    (a copy of the reference, say), which --force would otherwise delete."""
    if dest.exists() and not dest.is_dir():
        raise ExerciseError(f"{dest} is a file, not a directory")
    for reference in {REFERENCE_ROOT, Path(reference_root).resolve()}:
        if dest.is_relative_to(reference) or reference.is_relative_to(dest):
            raise ExerciseError(f"refusing to write into {dest}: it overlaps the project's "
                                f"reference versions in {reference}; write the exercise to a "
                                f"directory of your own, e.g. ~/torchlet-mine")
    foreign = [p for p in sorted(dest.iterdir()) if p.is_dir() and VERSION_DIR.match(p.name)
               and not (p / MARK).exists()] if dest.is_dir() else []
    if foreign:
        raise ExerciseError(f"{foreign[0]} was not written by `torchlet exercise` (it has no {MARK}"
                            f"): exercise writes only into trees of its own; use a new directory")


def make_exercise(version: str, dest: Path, learner_root: Path | None = None, *,
                  reference_root: Path = REFERENCE_ROOT, force: bool = False) -> Exercise:
    """Write a learner tree for `version` under `dest`.

    Earlier versions come from `learner_root` where the learner has finished them (no stubs
    left), from the reference otherwise; one already finished in `dest` is kept as it is. The
    version itself is the reference with every function body stubbed. `force` replaces an
    existing copy of the version, and an unfinished earlier one, instead of refusing. Every
    refusal comes before anything is written or deleted."""
    name = resolve(version, reference_root)
    names = version_names(reference_root)
    dest = Path(dest).expanduser().resolve()
    _refuse_foreign(dest, reference_root)
    target = dest / name
    if target.exists() and not force:
        raise ExerciseError(f"{target} exists; it may hold your work (use --force to "
                            f"replace it with fresh stubs)")
    earlier = names[:names.index(name)]
    kept = [e for e in earlier if (dest / e).exists() and is_done(dest / e)]
    unfinished = [e for e in earlier if (dest / e).exists() and e not in kept]
    if unfinished and not force:
        here = dest / unfinished[0]
        left = stubs_left(here)
        raise ExerciseError(f"{here} still has stubs ({', '.join(left[:4])}...): finish "
                            f"it first, or use --force to replace it with the reference")

    for path in [target, *(dest / e for e in unfinished)]:
        if path.exists():
            shutil.rmtree(path)
    dest.mkdir(parents=True, exist_ok=True)
    if not (dest / "__init__.py").exists():
        (dest / "__init__.py").write_text(ROOT_INIT)
    sources = {}
    for e in earlier:
        here = dest / e
        if e in kept:
            sources[e] = str(here)
            continue
        mine = Path(learner_root) / e if learner_root else None
        src = mine if mine and mine.is_dir() and is_done(mine) else Path(reference_root) / e
        _copy_version(src, here)
        _mark(here, f"copied from {src}")
        sources[e] = str(src)

    spec_paths = spec_modules(name, root=reference_root)
    specs = _spec_names(spec_paths)
    _copy_version(Path(reference_root) / name, target)
    _mark(target, "stubs")
    stubbed = []
    for path in sorted(target.rglob("*.py")):
        module = module_name(target, path)
        path.write_text(stub_source(path.read_text(), name, module, spec_paths))
        stubbed += [f"{module}.{q}" for q in remaining_stubs(path)]
    return Exercise(dest, name, specs, stubbed, sources)


# ---------------------------------------------------------------- running specs

@dataclass
class Outcome:
    test: str        # spec/test_x.py::test_name[id]
    status: str      # passed, failed, skipped
    message: str = ""
    text: str = ""


def child_env() -> dict[str, str]:
    """The environment for a nested pytest: without the variables of the pytest (and xdist
    worker) that launched it, so the child neither inherits its options nor thinks it's a
    worker."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))}


def run_specs(root: Path, version: str, specs: list[Path], extra: list[str] = (),
              capture: bool = True, env: dict[str, str] | None = None, timeout: float = 0,
              ) -> tuple[list[Outcome], subprocess.CompletedProcess]:
    """Run spec modules with `--impl-root root -k version` in a child pytest; read its junit.
    `env` adds variables to the child's environment (e.g. HYPOTHESIS_PROFILE); `timeout`, when
    not 0, limits each spec's setup, call and teardown to that many seconds."""
    limit = ["-p", "torchlet.spec_timeout", f"--spec-timeout={timeout:g}"] if timeout else []
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", *spec_args(root, version, specs, xml), *limit,
               *extra]
        proc = subprocess.run(cmd, cwd=REPO, env={**child_env(), **(env or {})}, text=True,
                              capture_output=capture)
        outcomes = read_junit(xml) if xml.exists() else []
    return outcomes, proc


def spec_args(root: Path, version: str, specs: list[Path], xml: Path) -> list[str]:
    """pytest's arguments for a version's spec modules against a tree, results in junit xml."""
    return [*map(str, specs), f"--impl-root={root}", "-k", version, "-p", "no:randomly", "-q",
            f"--junitxml={xml}"]


def stub_run_env() -> dict[str, str]:
    """For runs against pristine stubs: the `stubs` Hypothesis profile where the suite registers
    one. Every example fails at once on a stub, so shrinking and explaining it is wasted time."""
    import hypothesis

    try:
        hypothesis.settings.get_profile("stubs")
    except hypothesis.errors.InvalidArgument:
        return {}
    return {"HYPOTHESIS_PROFILE": "stubs"}


def read_junit(path: Path) -> list[Outcome]:
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        cut = max((i for i, p in enumerate(parts) if p.startswith("test")), default=None)
        test = "::".join(["/".join(parts[:cut + 1]) + ".py", *parts[cut + 1:], case.get("name")]) \
            if cut is not None else case.get("name", "?")
        status, message, text = "passed", "", ""
        for child in case:
            if child.tag in ("failure", "error"):
                status, message, text = "failed", child.get("message", ""), child.text or ""
                break
            if child.tag == "skipped":
                status, message = "skipped", child.get("message", "")
        if outcomes.get(test, Outcome(test, "passed")).status != "failed":
            outcomes[test] = Outcome(test, status, message, text)
    return list(outcomes.values())


def stub_hits(outcome: Outcome) -> list[str]:
    """`module.qualname` of the stubs whose NotImplementedError shows in a failure."""
    return [m.group(2) for m in STUB_MESSAGE.finditer(outcome.message + "\n" + outcome.text)]


def timed_out(outcome: Outcome) -> re.Match | None:
    """The time-limit message of a spec that a function of the tree did not return from."""
    return TIMEOUT_MESSAGE.search(outcome.message + "\n" + outcome.text)


def reason(outcome: Outcome) -> str:
    hits = stub_hits(outcome)
    if hits:
        return f"stub {hits[0]} raised NotImplementedError"
    if stuck := timed_out(outcome):
        return f"{stuck[2]} did not return in {stuck[3]} s"
    first = (outcome.message or outcome.text).strip().splitlines()
    return first[0][:110] if first else "failed"


def summarize(version: str, version_dir: Path, outcomes: list[Outcome],
              reference_dir: Path | None = None) -> str:
    """The report of a check; `reference_dir` holds the version's reference source, whose calls
    order the stubs left (the version's own directory where it has none)."""
    counts = {s: sum(o.status == s for o in outcomes) for s in ("passed", "failed", "skipped")}
    lines = [f"{version}: " + ", ".join(f"{n} {s}" for s, n in counts.items())]
    failed = [o for o in outcomes if o.status == "failed"]
    if not outcomes:
        return lines[0] + "\nno spec ran: see the pytest output above"
    left = stubs_left(version_dir)
    if not failed and not left:
        lines.append("every spec of this version passes, and no stub is left.")
        names = version_names(REFERENCE_ROOT)
        later = names[names.index(version) + 1:] if version in names else []
        lines.append(f"next: torchlet exercise {later[0]} {version_dir.parent}" if later else
                     "that was the newest version: every idea of the runtime is yours")
        return "\n".join(lines)
    if not failed:
        lines.append(f"every spec passes, but {len(left)} function(s) are still stubs, which no "
                     f"spec of {version} reaches; the version is not done until you write them:")
        lines += [f"  {name}" for name in left]
        return "\n".join(lines)
    by_module = {}
    for o in failed:
        by_module.setdefault(o.test.split("::")[0], []).append(o)
    lines.append("failing specs:")
    for module, tests in by_module.items():
        lines.append(f"  {module}: {len(tests)} failing")
        for o in tests[:3]:
            lines.append(f"    {o.test.split('::', 1)[1]}: {reason(o)}")
        if len(tests) > 3:
            lines.append(f"    ... and {len(tests) - 3} more")
    files = function_files(version_dir) if version_dir.is_dir() else {}
    hits = {h for o in failed for h in stub_hits(o)}
    reached = [f for f in files if f in hits] + sorted(hits - set(files))
    source = reference_dir if reference_dir and reference_dir.is_dir() else version_dir
    todo = need_order(left + [f for f in reached if f not in left], reached, calls(source))
    stuck = next((m for o in failed if (m := timed_out(o))), None)
    if stuck:  # the run stopped at it: every later spec that reaches it would wait as long
        lines.append(f"next: make {stuck[2]} return (it was still at {stuck[4]} after {stuck[3]} s"
                     f"; the specs after it did not run)")
        rest = todo
    elif reached:
        nxt = todo[0]
        blocking = [o.test for o in failed if nxt in stub_hits(o)]
        where = f" in {files[nxt]}" if nxt in files else ""
        lines.append(f"next: implement {nxt}{where}")
        lines.append(f"      ({len(blocking)} failing spec(s) reach it, e.g. {blocking[0]})")
        rest = todo[1:]
    else:
        lines.append(f"next: make {failed[0].test} pass (no stub left in its way)")
        rest = todo
    if rest:
        label = "then: " if reached and not stuck else "stubs left: "
        lines.append(textwrap.fill(", ".join(rest), width=100, initial_indent=label,
                                   subsequent_indent=" " * len(label), break_on_hyphens=False))
    return "\n".join(lines)


def check(root: Path, version: str | None = None, extra: list[str] = (),
          show_output: bool = False, timeout: float = DEFAULT_TIMEOUT) -> int:
    root = Path(root).resolve()
    names = version_names(root)
    if not names:
        print(f"{root} holds no versions; start with `torchlet exercise v00 {root}`")
        return 2
    name = resolve(version) if version else names[-1]  # unknown: the reference's names listed
    if name not in names:
        raise UnknownVersionError(f"{root} has no {name} yet (it holds {', '.join(names)}); "
                                  f"start it with `torchlet exercise {name} {root}`")
    specs = spec_modules(name)
    if not specs:
        print(f"{name} has no spec module yet (looked for {SPEC_DIR}/test_v*)")
        return 2
    try:  # the specs would only fail to import it, each with a traceback
        for earlier in names[:names.index(name) + 1]:
            for path in sorted((root / earlier).rglob("*.py")):
                parse(path)
    except LearnerSyntaxError as e:
        print(e, file=sys.stderr)
        return 1
    print(f"running {', '.join(_spec_names(specs))} against {root / name}", flush=True)
    outcomes, proc = run_specs(root, name, specs, extra, capture=not show_output,
                               timeout=timeout)
    if not outcomes and proc.stdout:
        print(proc.stdout[-4000:], proc.stderr[-2000:])
    print(summarize(name, root / name, outcomes, REFERENCE_ROOT / name))
    if proc.returncode == 0 and stubs_left(root / name):
        return 1  # never "done" while a stub remains, even one no spec reaches
    return proc.returncode


# ---------------------------------------------------------------- diff

def effective_modules(version: str, root: Path = REFERENCE_ROOT) -> dict[str, Path]:
    """Each module file a version runs with: its own, or the one of the nearest earlier version
    that has a file of that name."""
    names = version_names(root)
    files = {}
    for name in names[:names.index(version) + 1]:
        files.update(own_modules(name, root))
    return files


def own_modules(version: str, root: Path = REFERENCE_ROOT) -> dict[str, Path]:
    """The module files a version's own directory holds, by their path in it."""
    return {str(path.relative_to(Path(root) / version)): path
            for path in sorted((Path(root) / version).rglob("*.py"))}


def _owner(path: Path, root: Path) -> str:
    return path.relative_to(Path(root).resolve()).parts[0]


REWRITE = 0.5  # below this share of common lines, diff shows a replacing file whole


def version_pair(a: str, b: str | None, root: Path) -> tuple[str, str]:
    """(the older, the newer) of `torchlet diff A [B]`: B's predecessor and B when B is left out.
    The same version twice and a newer one first are refused: the header read them as changes
    (v08 replacing itself; v14 replacing v15's files)."""
    names = version_names(root)
    if b is None:
        b = resolve(a, root)
        if names.index(b) == 0:
            raise UnknownVersionError(f"{b} is the first version; name two versions to compare")
        return names[names.index(b) - 1], b
    a, b = resolve(a, root), resolve(b, root)
    if a == b:
        raise TorchletError(f"{a} twice: name two versions, or one to compare with the version "
                            f"before it")
    if names.index(a) > names.index(b):
        raise TorchletError(f"{a} comes after {b}: name the older version first (torchlet diff "
                            f"{b} {a})")
    return a, b


def diff_header(a: str, b: str, old: dict[str, Path], new: dict[str, Path], root: Path) -> str:
    """Which files b owns (and which of a's each replaces), which each version between a and b
    owns, and which of a's b runs too. Every version between is named with its files, not only
    those still standing by b: b's classes build on theirs (v16's loop on v14's, whose loop.py
    v16's replaces), so either view can show code from any of them."""
    def was(rel: str) -> str:
        return f"replaces {_owner(old[rel], root)}/{rel}" if rel in old else "new"

    names = version_names(root)
    owned = ", ".join(f"{rel} ({was(rel)})" for rel in own_modules(b, root))
    head = [f"{a} -> {b}", f"  {b} owns: {owned}"]
    between = names[names.index(a) + 1:names.index(b)]
    if between:
        head.append("  changed by the versions between:")
        head += [f"    {name}: {', '.join(own_modules(name, root))}" for name in between]
    same = [f"{rel} ({_owner(path, root)})" for rel, path in sorted(new.items())
            if old.get(rel) == path]
    return "\n".join(head + [f"  the same in both: {', '.join(same) or '-'}"]) + "\n\n"


def method_view(a: str, b: str, root: Path) -> str:
    """The site's method-level compare as text: per part the recipes hold differently, each
    method the newer part runs against the one it takes the place of."""
    changes, why = method_changes(a, b, root)
    if why:
        return f"(no method view here: {why}; --files shows the whole files)\n"
    return as_text(changes) or "(the two recipes hold the same parts; --files shows the files)\n"


def file_view(old: dict[str, Path], new: dict[str, Path], root: Path) -> str:
    """Each file that differs as a unified diff; a file rewritten on top of the one it replaces
    whole."""
    out = []
    for rel in sorted(set(old) | set(new)):
        src, dst = old.get(rel), new.get(rel)
        if src == dst:
            continue
        src_label = f"{_owner(src, root)}/{rel}" if src else "/dev/null"
        dst_label = f"{_owner(dst, root)}/{rel}" if dst else "/dev/null"
        src_lines = src.read_text().splitlines(keepends=True) if src else []
        dst_lines = dst.read_text().splitlines(keepends=True) if dst else []
        if src_lines and dst_lines and \
                difflib.SequenceMatcher(None, src_lines, dst_lines).ratio() < REWRITE:
            # A file that builds on the one it replaces (a subclass, say) shares little text
            # with it: its own lines say what changes; the old file's lines would be noise.
            out += [f"--- {src_label} (built on, not repeated)\n", f"+++ {dst_label}\n",
                    f"@@ the whole of {dst_label} @@\n", *("+" + line for line in dst_lines)]
        else:
            out.extend(difflib.unified_diff(src_lines, dst_lines, src_label, dst_label))
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
    return "".join(out)


def diff(a: str, b: str | None = None, root: Path = REFERENCE_ROOT, *, files: bool = True) -> str:
    """What changes from version a to version b (b's predecessor to b when b is None): the
    header, then the whole files' diffs (files) or the method view. Files by default here, the
    method view in the CLI: it imports both versions' packages, which a caller that wants the
    text alone need not pay for."""
    root = Path(root).resolve()
    a, b = version_pair(a, b, root)
    old, new = effective_modules(a, root), effective_modules(b, root)
    body = file_view(old, new, root) if files else method_view(a, b, root)
    return diff_header(a, b, old, new, root) + body


# ---------------------------------------------------------------- CLI

def _cmd_exercise(args) -> int:
    ex = make_exercise(args.version, Path(args.dir), args.learner_root, force=args.force)
    print(f"wrote {ex.root / ex.version}: {len(ex.stubbed)} functions to implement")
    for earlier, src in ex.sources.items():
        print(f"  {earlier} from {src}")
    print(f"specs: {', '.join(ex.specs) or '(none yet)'}")
    print(f"next: torchlet check {ex.root} -k {ex.version}")
    return 0


def _existing_dir(path: str | Path, what: str) -> Path:
    path = Path(path)
    if not path.is_dir():
        kind = "a file, not a directory" if path.exists() else "does not exist"
        raise TorchletError(f"{what} {path}: {kind}")
    return path


def _check_options(parser) -> None:
    parser.add_argument("-k", default=None, metavar="VERSION",
                        help="the version to check (default: the newest in DIR)")
    parser.add_argument("--show-output", action="store_true", help="show pytest's own output")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"fail a spec whose setup, call or teardown runs longer, naming "
                             f"the function it was in, and stop (default {DEFAULT_TIMEOUT:g}; "
                             f"0: no limit)")


def _cmd_check(args, options: argparse.ArgumentParser) -> int:
    """`args.words` holds everything from DIR on, `--` included: argparse gives a positional
    after DIR nothing once an option follows DIR, so check's own options after DIR
    (`check DIR -k v06 -- -x`, the form the docs print) are read here, and pytest's after `--`."""
    words = args.words
    cut = words.index("--") if "--" in words else len(words)
    _, unknown = options.parse_known_args(words[:cut], namespace=args)
    if unknown:
        raise TorchletError(f"check: unrecognized arguments: {' '.join(unknown)} (pytest's "
                            f"options go after --, e.g. `torchlet check DIR -- -x`)")
    if args.timeout < 0:
        raise TorchletError(f"--timeout must be 0 (no limit) or more, got {args.timeout:g}")
    root = _existing_dir(args.dir, "learner tree")
    return check(root, args.k, words[cut + 1:], args.show_output, args.timeout)


def _cmd_diff(args) -> int:
    root = _existing_dir(args.impl_root, "--impl-root") if args.impl_root else REFERENCE_ROOT
    sys.stdout.write(diff(args.a, args.b, root, files=args.files))
    return 0


def add_commands(subparsers) -> None:
    """Add `exercise`, `check` and `diff` to the torchlet CLI; each sets `run(args) -> int`."""
    p = subparsers.add_parser("exercise", help="write a learner tree with vNN's functions stubbed")
    p.add_argument("version", help="the version to exercise, e.g. v00 or v01_0")
    p.add_argument("dir", help="the learner tree to write (created if missing)")
    p.add_argument("--learner-root", type=Path, default=None,
                   help="take earlier versions from this tree where you have finished them")
    p.add_argument("--force", action="store_true",
                   help="replace an existing copy of the version with fresh stubs")
    p.set_defaults(run=_cmd_exercise)

    usage = "%(prog)s [-h] [-k VERSION] [--show-output] [--timeout SECONDS] DIR [-- PYTEST_ARGS]"
    p = subparsers.add_parser("check", help="run a version's specs against a learner tree",
                              usage=usage)
    _check_options(p)
    p.add_argument("words", nargs=argparse.REMAINDER, metavar="DIR [-- PYTEST_ARGS]",
                   help="the learner tree; after --, more pytest arguments, e.g. -- -x")
    options = argparse.ArgumentParser(prog=p.prog, usage=usage, add_help=False)
    _check_options(options)
    options.add_argument("dir", metavar="DIR", help="the learner tree")
    p.set_defaults(run=lambda args: _cmd_check(args, options))

    p = subparsers.add_parser("diff", help="what changed between two versions, method by method "
                                           "(the site's compare view)")
    p.add_argument("a", help="the older version (or the only one: compare with its predecessor)")
    p.add_argument("b", nargs="?", default=None, help="the newer version")
    p.add_argument("--files", action="store_true",
                   help="the whole files' diffs instead of the methods")
    p.add_argument("--impl-root", default=None, help="a tree of versions other than the reference")
    p.set_defaults(run=_cmd_diff)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchlet.learner")
    add_commands(parser.add_subparsers(dest="command", required=True))  # as `torchlet` does
    try:
        args = parser.parse_args(argv)
        return args.run(args)
    except TorchletError as e:
        print(f"torchlet: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ntorchlet: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
