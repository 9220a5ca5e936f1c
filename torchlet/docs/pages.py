"""What a version page says, read from the specs without running or importing them.

A version's page is the docstring of each of its spec modules (its page contract: five labelled
sections) plus the test functions of those modules, and its recipe: the parts its engine is
assembled from (PARTS). The specs are read with `ast`, so the build cannot run a spec by
accident; the recipe is data that only running the version's package makes, so that package is
imported (torchlet/parts.py reads it, as `torchlet parts` does)."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import implementations
from implementations import REFERENCE_ROOT, version_names
from torchlet import contract
from torchlet.contract import TorchletError
from torchlet.learner import SPEC_DIR, effective_modules, spec_modules
from torchlet.parts import PartRow, recipe_rows

# (key, heading). The label in a docstring may be longer ("Why v07 needs it:", "Files to
# compare:"), so each key has its own pattern below.
SECTIONS = (
    ("introduces", "What it introduces"),
    ("why", "Why the previous version needs it"),
    ("principle", "Core principle"),
    ("files", "Files"),
    ("tradeoff", "Tradeoff left visible"),
)
LABELS = {
    "introduces": r"What it introduces",
    "why": r"Why(?: v\d\d(?:_\d)? needs it| the previous version needs it)?",
    "principle": r"Core principle",
    "files": r"Files(?: to compare)?",
    "tradeoff": r"Tradeoff left visible",
}
LABEL = re.compile(r"^(?:" + "|".join(f"(?P<{k}>{v})" for k, v in LABELS.items()) + r"):\s*")
PART = re.compile(r"\b(?:page|part) (\d+)\b")


class MissingSectionError(TorchletError):
    """A spec module's page lacks one of the five contract sections."""


@dataclass
class Spec:
    name: str          # test_each_decode_pass_feeds_exactly_one_new_token
    qualname: str      # TestX.test_y for methods
    line: int
    doc: str

    @property
    def sentence(self) -> str:
        words = self.name.removeprefix("test_").replace("_", " ").strip()
        return words[:1].upper() + words[1:]


@dataclass
class Part:
    """One spec module of a version: its page contract and its specs."""
    path: Path
    title: str
    sections: dict[str, str]
    specs: list[Spec]


@dataclass
class VersionPage:
    name: str
    idea: str
    capability: str
    parts: list[Part]
    owned: list[str] = field(default_factory=list)          # module files under the version
    inherited: dict[str, str] = field(default_factory=dict)  # file -> version it comes from
    recipe: list[PartRow] | None = None                      # its PARTS; None: it declares none
    recipe_error: str = ""                                   # why the recipe could not be read

    @property
    def specs(self) -> list[Spec]:
        return [s for p in self.parts for s in p.specs]


def split_page(doc: str) -> tuple[str, dict[str, str]]:
    """(title, {section key: text}). The title is the first paragraph; a section runs from its
    label to the next label. Other labelled lines ("How prefill and decode share a step:") stay
    inside the section they appear in."""
    title, _, body = doc.strip().partition("\n\n")
    sections, key = {}, None
    for line in body.splitlines():
        m = LABEL.match(line)
        if m:
            key = m.lastgroup
            sections[key] = line[m.end():]
        elif key:
            sections[key] += "\n" + line
    return " ".join(title.split()), {k: v.strip() for k, v in sections.items()}


def _is_fixture(decorator: ast.expr) -> bool:
    """`@pytest.fixture`, `@pytest.fixture(...)` or `@fixture`."""
    d = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", None)) == "fixture"


def _is_spec(node: ast.stmt) -> bool:
    """A function pytest collects as a test: named test*, and not a fixture (pytest collects no
    fixture, so an autouse `tested_once` is no spec, whatever its name starts with)."""
    return (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name.startswith("test")
            and not any(_is_fixture(d) for d in node.decorator_list))


def read_specs(tree: ast.Module) -> list[Spec]:
    found = []
    for node in tree.body:
        if _is_spec(node):
            found.append(Spec(node.name, node.name, node.lineno, ast.get_docstring(node) or ""))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found += [Spec(item.name, f"{node.name}.{item.name}", item.lineno,
                           ast.get_docstring(item) or "") for item in node.body if _is_spec(item)]
    return found


def read_part(version: str, path: Path) -> Part:
    tree = ast.parse(path.read_text())
    doc = ast.get_docstring(tree) or ""
    title, sections = split_page(doc)
    for key, heading in SECTIONS:
        if key not in sections:
            raise MissingSectionError(
                f"{version}: {path.name} has no '{heading}' section in its page docstring")
    return Part(path, title, sections, read_specs(tree))


def _part_order(version: str, part: Part) -> tuple[int, int, str]:
    """Numbered pages in their order; else the module named after the version first."""
    m = PART.search(part.title.split(":")[0])
    return (int(m.group(1)) if m else 0, part.path.stem != f"test_{version}", part.path.name)


def capability(version: str, root: Path = REFERENCE_ROOT) -> str:
    """The capability a version adds: the last name in its `CAPABILITIES = ... + (NAME,)`,
    read from the package source, so that Triton versions are not imported to find it."""
    tree = ast.parse((Path(root) / version / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CAPABILITIES"
                                                for t in node.targets):
            names = [n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)]
            if names:
                return str(getattr(contract, names[-1], names[-1]))
    return "—"


def package_idea(version: str, root: Path) -> str:
    doc = ast.get_docstring(ast.parse((Path(root) / version / "__init__.py").read_text())) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return first.split(": ", 1)[-1] if first else ""


def read_recipe(version: str, root: Path) -> tuple[list[PartRow] | None, str]:
    """(the version's recipe rows or None, ""); where its package cannot be imported here (a
    Triton version without Triton installed), (None, why)."""
    try:
        return recipe_rows(implementations.load(version, root)), ""
    except ImportError as e:
        return None, f"{type(e).__name__}: {e}"


def version_pages(spec_dir: Path = SPEC_DIR, root: Path = REFERENCE_ROOT) -> list[VersionPage]:
    pages = []
    for name in version_names(root):
        parts = sorted((read_part(name, p) for p in spec_modules(name, spec_dir, root)),
                       key=lambda part: _part_order(name, part))
        idea = parts[0].title.split(": ", 1)[-1] if parts else package_idea(name, root)
        page = VersionPage(name, idea, capability(name, root), parts)
        page.recipe, page.recipe_error = read_recipe(name, root)
        for rel, path in sorted(effective_modules(name, root).items()):
            owner = path.relative_to(Path(root)).parts[0]
            if owner == name:
                page.owned.append(rel)
            else:
                page.inherited[rel] = owner
        pages.append(page)
    return pages
