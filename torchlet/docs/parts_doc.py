"""docs/parts.md's generated blocks: `python -m torchlet.docs.parts_doc [--check]`.

docs/parts.md is prose around blocks this module writes, each between
`<!-- generated: NAME -->` and `<!-- end generated -->`: a part's section (its Protocols from
torchlet/contract/parts.py, each member with its one line of promise and the parts whose code
uses it; the versions that write the part, from their recipes) and the walk of one v16 decode
step (torchlet/docs/walk.py). Run without arguments it rewrites those blocks in place; with
--check it says which differ and exits 1. spec/test_docs_site.py fails when the file differs
from what this writes, so the page cannot drift from the Protocols, the recipes or the code.
"""
from __future__ import annotations

import ast
import inspect
import re
import sys
import typing
from pathlib import Path

import implementations
from implementations import REFERENCE_ROOT, version_names
from torchlet.contract import PART_NAMES, declared, parts as contract_parts, protocol_of
from torchlet.learner import REPO

PARTS_MD = REPO / "docs" / "parts.md"
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)",
                   re.S)
WALK_VERSION = "v16"
WALK_COMMAND = f"PYTHONPATH=. python -m torchlet.docs.walk {WALK_VERSION}"


def short(version: str) -> str:
    return contract_parts.short_version(version)


def span(versions: list[str]) -> str:
    """"v08-v11" of consecutive versions, "v16" of one."""
    first, last = short(versions[0]), short(versions[-1])
    return first if first == last else f"{first}–{last}"


def is_protocol(obj) -> bool:
    return isinstance(obj, type) and getattr(obj, "_is_protocol", False) and \
        obj.__module__ == contract_parts.__name__


def protocols_of_part(part: str) -> list[type]:
    """Every Protocol of the part: those PROTOCOLS names for it, their bases, and the Protocols
    their members are annotated with (the model's ops and memory), in the order parts.py
    defines them."""
    found: list[type] = []

    def add(cls):
        if cls in found or not is_protocol(cls) or cls is typing.Protocol:
            return
        found.append(cls)
        for base in cls.__mro__[1:]:
            add(base)
        for member in declared(cls).values():
            add(member)

    for _, protocol in contract_parts.PROTOCOLS.get(part, ()):
        add(protocol)
    return sorted(found, key=lambda cls: inspect.getsourcelines(cls)[1])


def own_members(cls: type) -> list[str]:
    """The members the Protocol itself declares (not its bases'), in source order."""
    source = inspect.getsource(cls)
    names = [n for n in getattr(cls, "__annotations__", {})]
    names += [n for n, v in vars(cls).items()
              if callable(v) and (not n.startswith("_") or n == "__contains__")]
    return sorted(set(names), key=lambda n: re.search(
        rf"^\s+(def )?{re.escape(n)}\b", source, re.M).start())


def attribute_notes(cls: type) -> dict[str, tuple[str, str]]:
    """name -> (its annotation as written, the comment after it)."""
    out = {}
    for line in inspect.getsource(cls).splitlines():
        m = re.match(r"\s+(\w+): ([^#]+?)\s*(?:#\s*(.*))?$", line)
        if m and m.group(1) in getattr(cls, "__annotations__", {}):
            out[m.group(1)] = (m.group(2), m.group(3) or "")
    return out


def signature(function) -> str:
    params = []
    for p in list(inspect.signature(function).parameters.values())[1:]:
        params.append(("*" if p.kind is p.VAR_POSITIONAL else "") + p.name
                      + (f"={p.default!r}" if p.default is not p.empty else ""))
    return f"{function.__name__}({', '.join(params)})"


def one_line(text: str) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


# --- who uses what: the part members other parts' code names ----------------------------------

def _root(node: ast.expr, names: dict[str, str], assembly: str | None) -> str | None:
    """The part an expression stands for: self.P / self._P, assembly.P, or a name bound to one."""
    def bare(name: str) -> str | None:
        name = name[1:] if name.startswith("_") else name
        return "loop" if name == "engine" else name if name in PART_NAMES else None

    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
            node.value.id in ("self", assembly):
        return bare(node.attr)
    return None


def _file_uses(path: Path) -> set[tuple[str, str]]:
    """(part, member) for every `root.member` in the file, and (part, "member.inner") for
    `root.member.inner`, roots found much as spec/test_part_protocols.py's rule finds them
    (parameters and locals named after a part, self.P, an assembly's P, a request and an item
    of requests, running or waiting); and (part, name) for an engine's `name = Served("part")`,
    which hands the engine's callers the part's member."""
    tree, found = ast.parse(path.read_text()), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                getattr(node.value.func, "id", None) == "Served" and node.value.args and \
                isinstance(node.value.args[0], ast.Constant):
            part = str(node.value.args[0].value).split(".")[-1]
            found.update((part, t.id) for t in node.targets if isinstance(t, ast.Name))
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = [a.arg for a in function.args.posonlyargs + function.args.args
                  + function.args.kwonlyargs]
        assembly = params[1] if function.name == "assemble" and len(params) > 1 else None
        names = {"request": "request"}
        for arg in params:
            bare = arg[1:] if arg.startswith("_") else arg
            if bare in PART_NAMES or bare == "engine":
                names[arg] = "loop" if bare == "engine" else bare
        body = list(ast.walk(function))
        for node in body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                    isinstance(node.targets[0], ast.Name):
                part = _root(node.value, names, assembly)
                if part is not None:
                    names[node.targets[0].id] = part
            gens = ([node] if isinstance(node, (ast.For, ast.comprehension)) else
                    node.generators if isinstance(node, (ast.ListComp, ast.SetComp,
                                                         ast.GeneratorExp, ast.DictComp)) else [])
            for g in gens:
                it = g.iter
                last = it.id if isinstance(it, ast.Name) else getattr(it, "attr", None)
                if isinstance(g.target, ast.Name) and last in ("requests", "running", "waiting"):
                    names[g.target.id] = "request"
        parents = {id(n.value): n for n in body if isinstance(n, ast.Attribute)}
        for node in body:
            if isinstance(node, ast.Attribute):
                part = _root(node.value, names, assembly)
                if part is not None:
                    found.add((part, node.attr))
                    outer = parents.get(id(node))
                    if outer is not None:
                        found.add((part, f"{node.attr}.{outer.attr}"))
    return found


def callers(root: Path = REFERENCE_ROOT) -> dict[tuple[str, str], set[str]]:
    """(part, member) -> the parts whose files use it (a version's part file is named after its
    part; a version's __init__.py is its recipe). The model's own files, where the decoder, its
    ops and its memory call each other, and a part's use of itself are left out."""
    out: dict[tuple[str, str], set[str]] = {}
    for version in version_names(root):
        for path in sorted((Path(root) / version).rglob("*.py")):
            caller = path.stem if path.stem in PART_NAMES else (
                "recipe" if path.name == "__init__.py" else path.stem)
            if caller == "model":
                continue
            for part, member in _file_uses(path):
                if part != caller:
                    out.setdefault((part, member), set()).add(caller)
    return out


# --- the blocks ---------------------------------------------------------------------------------

def writers(part: str, rows: dict[str, list]) -> list[tuple[list[str], object]]:
    """[(versions, row)] for each run of consecutive versions whose recipes hold the same part
    (rows: every version's recipe rows, in order)."""
    runs: list[tuple[list[str], object]] = []
    names = list(rows)
    for i, (version, recipe) in enumerate(rows.items()):
        row = next((r for r in recipe or () if r.name == part), None)
        if row is None:
            continue
        if runs and (runs[-1][1].writer, runs[-1][1].file, runs[-1][1].label) == \
                (row.writer, row.file, row.label) and runs[-1][0][-1] == names[i - 1]:
            runs[-1][0].append(version)
        else:
            runs.append(([version], row))
    return runs


def required_by(protocol: type, names: list[str]) -> list[str]:
    """The versions whose part must satisfy exactly this Protocol."""
    return [v for v in names for part, entries in contract_parts.PROTOCOLS.items()
            if any(p is protocol for _, p in entries) and protocol_of(part, v) is protocol]


def reached_as(part: str, cls: type) -> str:
    """"ops" for KernelOps, the model's: the member of the part's Protocols annotated with it
    ("" for one of the part's own Protocols)."""
    for _, protocol in contract_parts.PROTOCOLS.get(part, ()):
        for name, member in declared(protocol).items():
            if member is cls:
                return name
    return ""


def protocol_md(part: str, cls: type, names: list[str], used: dict) -> str:
    via = reached_as(part, cls)
    bases = [b.__name__ for b in cls.__bases__ if is_protocol(b)]
    versions = required_by(cls, names)
    said = one_line(cls.__doc__)
    said = said.split(": ", 1)[1] if re.match(r"v\d\d(_\d)?(-v\d\d)?: ", said) else said
    head = [f"### {cls.__name__}", ""]
    where = (f"The part's Protocol at {span(versions)}" if versions else
             "Not a part's Protocol by itself: " + (
                 "the base of " + ", ".join(f"`{c.__name__}`" for c in _derived(cls)) if
                 _derived(cls) else f"the part's `{via}`, reached for these members alone"))
    head.append(f"{where}" + (f"; extends {', '.join(f'`{b}`' for b in bases)}" if bases else "")
                + f". {said[:1].upper() + said[1:]}")
    notes = attribute_notes(cls)
    rows = ["", "| member | promise | used by |", "|---|---|---|"]
    for name in own_members(cls):
        value = vars(cls).get(name)
        if callable(value):
            member, promise = f"`{signature(value)}`", one_line(value.__doc__)
        else:
            annotation, comment = notes.get(name, (str(cls.__annotations__[name]), ""))
            inner = declared(cls).get(name)
            if not comment and is_protocol(inner):
                comment = f"an object inside the part: callers use its [{inner.__name__}]" \
                          f"(#{inner.__name__.lower()}) members alone"
            member, promise = f"`{name}: {one_line(annotation)}`", one_line(comment)
        by = sorted(used.get((part, f"{via}.{name}" if via else name), ()))
        rows.append(f"| {member} | {promise} | {', '.join(by) if by else '—'} |")
    return "\n".join(head + rows)


def _derived(cls: type) -> list[type]:
    return [c for entries in contract_parts.PROTOCOLS.values() for _, c in entries
            if cls in c.__bases__]


def part_md(part: str, names: list[str], rows: dict[str, list], used: dict) -> str:
    out = [f"## {part}", ""]
    m = re.search(rf"^# --- {part}: (.*?) -+$", inspect.getsource(contract_parts), re.M)
    if m:
        out += [m.group(1)[:1].upper() + m.group(1)[1:] + ".", ""]
    out += ["Written by (`torchlet parts vNN`):", "",
            "| versions | what it is | written by | file |", "|---|---|---|---|"]
    for versions, row in writers(part, rows):
        out.append(f"| {span(versions)} | `{row.label}` | {short(row.writer)} | `{row.file}` |")
    bare = [v for v, recipe in rows.items() if any(r.name == part for r in recipe or ())
            and protocol_of(part, v) is None]
    if bare:
        out += ["", f"At {span(bare)} the part has no Protocol: nothing but the loop calls it, "
                "and spec/test_part_protocols.py does not check it."]
    for cls in protocols_of_part(part):
        out += ["", protocol_md(part, cls, names, used)]
    return "\n".join(out) + "\n"


def walk_md() -> str:
    from torchlet.docs.walk import format_walk, walk

    return "    $ " + WALK_COMMAND + "\n" + "".join(
        "    " + line.rstrip() + "\n" for line in format_walk(walk(WALK_VERSION)).splitlines())


def blocks(root: Path = REFERENCE_ROOT) -> dict[str, str]:
    """name -> the text of each generated block."""
    from torchlet.parts import recipe_rows

    names = version_names(root)
    rows = {n: recipe_rows(implementations.load(n, root)) for n in names}
    used = callers(root)
    out = {part: part_md(part, names, rows, used) for part in PART_NAMES}
    out["walk"] = walk_md()
    return out


def update(text: str, made: dict[str, str]) -> str:
    """The text with each generated block's body replaced by its generated text."""
    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in made:
            raise KeyError(f"docs/parts.md: no generated block named {name!r}")
        return m.group(1) + made[name] + m.group(4)
    return BLOCK.sub(sub, text)


def main(argv: list[str]) -> int:
    text = PARTS_MD.read_text()
    made = blocks()
    missing = set(made) - {m.group("name") for m in BLOCK.finditer(text)}
    if missing:
        print(f"{PARTS_MD}: no block for {sorted(missing)}", file=sys.stderr)
        return 1
    new = update(text, made)
    if "--check" in argv:
        if new != text:
            print(f"{PARTS_MD} differs from what torchlet.docs.parts_doc writes; run "
                  "`PYTHONPATH=. python -m torchlet.docs.parts_doc`", file=sys.stderr)
            return 1
        return 0
    PARTS_MD.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
