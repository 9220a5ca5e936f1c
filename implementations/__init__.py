"""Reference versions of the Torchlet runtime, one package per version.

`discover(root)` finds version packages (`vNN_name` or `vNN_M_name`) under a tree, this one by
default or a learner's, and reads what each declares: CAPABILITIES, build, OPTIONS, layers and
KERNELS, and PARTS, the recipe its build assembles (torchlet/contract/ says what each is).
"""
from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from torchlet.contract import BuildOption, Recipe, TorchletError, UnknownVersionError, check_build

VERSION_DIR = re.compile(r"^v(\d\d)(?:_(\d))?_[a-z0-9_]+$")
REFERENCE_ROOT = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Version:
    name: str
    package: ModuleType

    @property
    def capabilities(self) -> tuple[str, ...]:
        return tuple(self.package.CAPABILITIES)

    @property
    def uses_triton(self) -> bool:
        return any(c.startswith("triton") for c in self.capabilities)

    def build(self, checkpoint, **options):
        """The package's build, once check_build has refused a bad device, dtype or option value
        (here, once for every version, from what OPTIONS declares)."""
        check_build(self.name, self.options, options)
        return self.package.build(checkpoint, **options)

    @property
    def recipe(self) -> Recipe | None:
        """The version's parts as data (PARTS), None for a package that declares none."""
        return getattr(self.package, "PARTS", None)

    def writer(self, part: str) -> str | None:
        """The full name of the version that wrote `part` of this version's engine: this version
        for a part it swaps, an earlier one for a part it takes over; None if it has no recipe
        or the recipe no such part."""
        recipe = self.recipe
        short = recipe.writer(part) if recipe is not None else None
        if short is None:
            return None
        names = version_names(Path(self.package.__file__).parent.parent)
        return next((n for n in names if n == short or _short(n) == short), short)

    @property
    def layers(self):
        return self.package.layers

    @property
    def options(self) -> tuple[BuildOption, ...]:
        """The options build takes besides device and dtype (OPTIONS). A package without OPTIONS
        is read as taking none; spec/test_build_options.py holds every version to declaring."""
        return tuple(getattr(self.package, "OPTIONS", ()))

    def option_for(self, role: str) -> BuildOption | None:
        """The option that plays `role` (a contract role such as MAX_LEN), None if none does."""
        return next((o for o in self.options if o.role == role), None)

    def options_by_role(self, values: dict) -> dict:
        """{role: value} as {option name: value}, for the roles the version has an option for; a
        None value is left out, so that the option's default stands."""
        found = {role: self.option_for(role) for role, value in values.items() if value is not None}
        return {option.name: values[role] for role, option in found.items() if option is not None}

    def kernel(self, name: str):
        """The kernel the version declares under a contract name (PAGED_DECODE_ATTENTION)."""
        kernels = getattr(self.package, "KERNELS", {})
        if name not in kernels:
            raise TorchletError(f"{self.name} declares no kernel {name!r} (its KERNELS: "
                                f"{', '.join(sorted(kernels)) or 'none'})")
        return kernels[name]

    def has_kernel(self, name: str) -> bool:
        return name in getattr(self.package, "KERNELS", {})


def version_names(root: Path = REFERENCE_ROOT) -> list[str]:
    """Version directories under root, in version order (v00, v01_0, v01_1, v02, ...)."""
    names = [p.name for p in Path(root).iterdir()
             if p.is_dir() and VERSION_DIR.match(p.name) and (p / "__init__.py").exists()]
    return sorted(names, key=lambda n: tuple(int(g or 0) for g in VERSION_DIR.match(n).groups()))


def _package_name(root: Path) -> str:
    """The import name of a tree: `implementations` for ours, a private alias for any other, so
    that versions inside it import each other with relative imports."""
    root = Path(root).resolve()
    if root == REFERENCE_ROOT:
        return "implementations"
    alias = "torchlet_tree_" + re.sub(r"\W", "_", str(root)).strip("_")
    if alias not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            alias, root / "__init__.py", submodule_search_locations=[str(root)])
        if spec is None or not (root / "__init__.py").exists():
            raise UnknownVersionError(f"{root} is not a tree of versions (no __init__.py)")
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module
        spec.loader.exec_module(module)
    return alias


def require_versions(root: Path) -> list[str]:
    """version_names(root), or an error saying why a tree holds none (a learner's --impl-root
    that points one level too high or low would otherwise list no versions and no reason)."""
    names = version_names(root)
    if not names:
        raise UnknownVersionError(f"{root} holds no versions: a version is a package named "
                                  f"vNN_name or vNN_M_name (e.g. v00_full_recompute) with an "
                                  f"__init__.py, directly inside it")
    return names


def _short(name: str) -> str:
    """v01_0_ragged_batch -> v01_0, v02_kv_cache -> v02: what a user types."""
    major, minor = VERSION_DIR.match(name).groups()
    return f"v{major}" + (f"_{minor}" if minor is not None else "")


def load(name: str, root: Path = REFERENCE_ROOT) -> Version:
    names = require_versions(root)
    if not name.strip():
        raise UnknownVersionError(f"the version name is empty; known versions: {', '.join(names)}")
    if name not in names:
        matches = [n for n in names if n.split("_")[0] == name or n.startswith(name + "_")]
        if len(matches) > 1:
            shorts = [_short(n) for n in matches]
            raise UnknownVersionError(f"ambiguous version {name!r}: {', '.join(shorts[:-1])} or "
                                      f"{shorts[-1]} ({', '.join(matches)})")
        if not matches:
            raise UnknownVersionError(
                f"unknown version {name!r}; known versions: {', '.join(names)}")
        name = matches[0]
    package = importlib.import_module(f"{_package_name(root)}.{name}")
    return Version(name, package)


def discover(root: Path = REFERENCE_ROOT) -> list[Version]:
    return [load(n, root) for n in version_names(root)]
