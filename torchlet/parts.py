"""`torchlet parts vNN`: a version's recipe (its PARTS, torchlet/contract/recipe.py's Recipe), one line
per part in assembly order: the part's name, what it is, the version that wrote it and the file
it lives in. The docs site's version pages show the same rows (recipe_rows)."""
from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PartRow:
    name: str            # the part's name in PART_NAMES: "kv", "runner"
    label: str           # what it is, as Recipe.table() names it: "KVCache", "Decoder instance"
    writer: str          # the full name of the version that wrote it: "v08_paged_gqa_py"
    file: str            # where it lives, relative to the tree ("v08_paged_gqa_py/kv.py"), else
                         # to the repository, else its module's name
    swapped: bool        # written by this version itself


def part_file(part: Any) -> Path | None:
    """The file a part is defined in: a module's own file; a class's or function's module's; an
    object's class's module's. None for one defined nowhere on disk."""
    if isinstance(part, types.ModuleType):
        found = getattr(part, "__file__", None)
    else:
        named = isinstance(part, type) or callable(part) and hasattr(part, "__qualname__")
        module = sys.modules.get(getattr(part if named else type(part), "__module__", None) or "")
        found = getattr(module, "__file__", None)
    return Path(found).resolve() if found else None


def made_in(part: Any, package: str) -> Path | None:
    """For an object made by a version (v13's `layers`, a PagedDecoder holding v13's ops), the
    file of that version's package whose module holds it: its class's file names the version
    that wrote the class, not the one that made this part. None where no such module holds it
    (a module, a class or a function: their own file says it)."""
    if isinstance(part, types.ModuleType) or isinstance(part, type) or callable(part) and \
            hasattr(part, "__qualname__"):
        return None
    homes = [m for name, m in list(sys.modules.items())
             if (name == package or name.startswith(package + ".")) and m is not None
             and any(v is part for v in vars(m).values())]
    # a package's __init__ re-exports what its modules made: the module that made it first
    homes.sort(key=lambda m: m.__name__ == package)
    found = getattr(homes[0], "__file__", None) if homes else None
    return Path(found).resolve() if found else None


def _where(part: Any, root: Path, package: str = "") -> str:
    from torchlet.learner import REPO

    path = made_in(part, package) if package else None
    path = path or part_file(part)
    if path is None:
        return getattr(part, "__module__", None) or type(part).__module__
    for base in (Path(root).resolve(), REPO):
        if path.is_relative_to(base):
            return str(path.relative_to(base))
    return str(path)


def recipe_rows(version) -> list[PartRow] | None:
    """The rows of an implementations.Version's recipe, in assembly order; None when the version
    declares no PARTS."""
    recipe = version.recipe
    if recipe is None:
        return None
    root = Path(version.package.__file__).resolve().parent.parent
    swapped = set(recipe.swapped())
    tree = version.package.__name__.rpartition(".")[0]  # "implementations", or a learner's

    def where(name: str) -> str:
        writer = version.writer(name)
        return _where(recipe.parts[name], root, f"{tree}.{writer}" if tree else writer)
    return [PartRow(name, label, version.writer(name), where(name), name in swapped)
            for name, label, _ in recipe.table()]


def format_rows(version_name: str, rows: list[PartRow]) -> str:
    """The recipe as aligned columns, a `*` before each part the version swaps."""
    table = [("part", "what it is", "written by", "file")] + [
        (r.name, r.label, r.writer, r.file) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    marks = ["  "] + ["* " if r.swapped else "  " for r in rows]
    lines = [mark + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[3]
             for mark, row in zip(marks, table)]
    return "\n".join([f"{version_name}'s recipe, in assembly order (* swapped by "
                      f"{version_name} itself)", *lines])


def run_parts(args) -> int:
    import implementations

    from torchlet.running import existing_dir
    from torchlet.contract import TorchletError

    root = (existing_dir(args.impl_root, "--impl-root") if args.impl_root is not None
            else implementations.REFERENCE_ROOT)
    version = implementations.load(args.version, root)
    rows = recipe_rows(version)
    if rows is None:
        raise TorchletError(f"{version.name} declares no recipe (PARTS)")
    print(format_rows(version.name, rows))
    return 0


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("parts", help="a version's recipe: each part, what it is, the "
                                            "version that wrote it and its file")
    p.add_argument("version", help="e.g. v14 or v14_overlap")
    p.add_argument("--impl-root", default=None,
                   help="tree of versions to read it from (default: implementations/)")
    p.set_defaults(run=run_parts)
