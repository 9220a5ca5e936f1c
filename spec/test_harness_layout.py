"""Meta: the harness's imports point down.

What it checks: among torchlet's own modules no import circle, counting the imports inside
functions as much as those at the top; no module of torchlet imports torchlet.cli but the entry
point (torchlet/__main__.py; the console script names torchlet.cli:main itself); and the entry
point, with every torchlet module it imports at its top, imports only the standard library at
its top; and the contract, a package of three modules (torchlet/contract/values.py,
capabilities.py, recipe.py), is imported as torchlet.contract only, the one thing of the harness
a version imports.
Why: a circle kept alive by an import inside a function works until someone moves that import to
the top, and it hides which module is the lower one, so a reader cannot tell where a shared piece
belongs. cli.py was used as a library by ten harness modules (pick_version, kernels_off, even
run_generate), which made circles with parallel.py, and bench's commands, main_job and the docs
site had their own. What several commands share now lies below them: torchlet/running.py (device,
dtype, threads, which version, the Triton switch), torchlet/generate.py (the Runner generate and
chat answer with), torchlet/bench/flags.py, torchlet/bench/contender.py, torchlet/methods.py.
Core principle: the graph is read from the source with `ast`, never by importing: an edge for
every `import` and `from ... import` of a torchlet module anywhere in a file. `from pkg import
name` points at pkg.name where that is a module, else at pkg; importing a module from outside its
package points at the package too, since Python runs the package's __init__ first (that is how
`learner -> docs.methods` closed a circle through docs/__init__.py). The standard-library rule
keeps `torchlet --help` and a Ctrl-C during the slow imports as cli.py's docstring says. The
contract's three modules hold one concern each (968 lines did all three); its __init__ names
every name once, so a version's import line does not change when a name moves between them.
Files: torchlet/ (all of it); torchlet/cli.py, torchlet/running.py, torchlet/generate.py,
torchlet/contract/__init__.py (the re-exports).
Tradeoff left visible: a package's __init__ may still import its own submodules inside functions
(the commands' lazy imports), and those submodules may not import the package back; an import
done with importlib and a string (bench/__init__.py's commands) is not seen.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import torchlet

PACKAGE = Path(torchlet.__file__).resolve().parent
ENTRY_POINTS = {"torchlet.__main__"}  # and the console script, torchlet.cli:main
CLI = "torchlet.cli"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = (package.name, *path.relative_to(package).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, package): p for p in sorted(package.rglob("*.py"))}


def imported(node: ast.AST, importer: str, is_package: bool, known) -> set[str]:
    """The torchlet modules an import statement names (none for another statement)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        here = importer.split(".") if is_package else importer.split(".")[:-1]
        base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
    found = set()
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            found.add(f"{base}.{alias.name}")
        elif base in known:
            found.add(base)
    return found


def with_packages(target: str, importer: str, known) -> set[str]:
    """target and each package above it that importing it runs first: those the importer is not
    inside (its own packages are already running)."""
    out, parts = {target}, target.split(".")
    for n in range(1, len(parts)):
        package = ".".join(parts[:n])
        if package in known and not (importer + ".").startswith(package + "."):
            out.add(package)
    return out


def import_graph(package: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line of the first such import}, top level and inside
    functions alike."""
    known = modules(package)
    graph = {}
    for name, path in known.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in imported(node, name, path.name == "__init__.py", known):
                for t in with_packages(target, name, known):
                    if t != name:
                        edges.setdefault(t, node.lineno)
        graph[name] = edges
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def describe(group: list[str], graph) -> str:
    inside = set(group)
    return "\n  ".join(f"{m} -> " + ", ".join(f"{t} (line {line})" for t, line in
                                               sorted(graph[m].items()) if t in inside)
                       for m in group)


def test_no_import_circle_among_torchlets_modules_counting_imports_inside_functions():
    graph = import_graph()
    found = circles(graph)
    assert not found, "import circles:\n  " + "\n\n  ".join(describe(g, graph) for g in found)


def test_only_the_entry_point_imports_torchlet_cli():
    graph = import_graph()
    users = sorted(f"{m} (line {edges[CLI]})" for m, edges in graph.items()
                   if CLI in edges and m not in ENTRY_POINTS)
    assert not users, (f"{', '.join(users)} import {CLI}: move what they need below it "
                       f"(torchlet/running.py, torchlet/generate.py)")


def top_imports(path: Path) -> set[str]:
    """The modules a file imports at its top, outside any function or class (absolute names;
    `from __future__` left out)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            out.add(node.module if not node.level else f"<relative {node.module}>")
    return out


def test_the_entry_point_reaches_only_the_standard_library_at_the_top_of_each_module():
    known = modules()
    seen, todo, outside = set(), [CLI], []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for module in top_imports(known[name]):
            if module in known:
                todo.append(module)
            elif module.split(".")[0] not in sys.stdlib_module_names:
                outside.append(f"{name} imports {module}")
    assert not outside, outside


CONTRACT = "torchlet.contract"


def torchlet_imports(path: Path, name: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, module) of each import of a torchlet module in a file, `from torchlet import x`
    read as torchlet.x; relative imports resolved against `name`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, f"{base}.{a.name}" if base == "torchlet" else base)
                      for a in node.names]
    return [(line, m) for line, m in found if m == "torchlet" or m.startswith("torchlet.")]


def test_the_contract_is_imported_as_torchlet_contract_and_implementations_import_nothing_else():
    """torchlet/contract/ is three modules (values, capabilities, recipe) behind one import path:
    a caller never names a module of it, and a version imports nothing else of the harness."""
    wrong = []
    trees = [(PACKAGE.parent / "implementations", "implementations"),
             (PACKAGE.parent / "spec", "spec"), (PACKAGE, "torchlet")]
    for root, top in trees:
        for path in sorted(root.rglob("*.py")):
            name = ".".join((top, *path.relative_to(root).with_suffix("").parts))
            if name.startswith(CONTRACT + ".") or name == CONTRACT + ".__init__":
                continue  # the package's own modules
            for line, module in torchlet_imports(path, name.removesuffix(".__init__"),
                                                 path.name == "__init__.py"):
                if module.startswith(CONTRACT + ".") or (top == "implementations"
                                                         and module != CONTRACT):
                    wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)
