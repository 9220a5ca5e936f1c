"""The one rule for which spec runs for which version, and why.

A spec says what it needs with one marker, `@pytest.mark.spec(...)`: on a module
(`pytestmark`), a class, a function or a param; each argument takes its closest value, so a
function's `spec(until=...)` adds to its module's `spec(needs=...)`. Its arguments:

- `needs=CAPABILITY`: runs against the versions that declare it. A spec that takes the `impl`
  fixture must say it; one that does not runs once, against no version.
- `until=CAPABILITY`: and not against the versions that declare it, a later idea that changes
  the property (v15 slices the prompts v04's specs see whole).
- `part="kv"` or `part=("kv", "model")`: a part's own spec (torchlet/contract/recipe.py's parts):
  left out for a version whose recipe took every part it names unchanged (parts.py).
- `subject=("paged_attention", ...)`: attributes of a version's package a part's spec tests;
  left out for a version whose package holds the same objects as an earlier one's.
- `first_with=("BlockPool", ...)`: objects a page exercises directly; skipped for a version
  that exports an earlier version's very objects (exports.py).
- `one_step_per_call=True`: watches what one step() call runs; skipped where a step launches
  the next step's decode (OVERLAP, v14 on).
- `engine_parts=True`: drives the engine's parts over random schedules; on a CPU skipped for a
  version that adds kernels alone, whose engine parts are an earlier version's (exports.py).
- `kernels=True`: runs Triton kernels on CPU, under the interpreter: skipped for a version that
  only inherits them (kernel_mode.py).
- a version whose idea is how the weights are held alone (v18, exports.WEIGHTS_ALONE) runs its
  own capability's specs only: on the float checkpoints the others use it builds its
  predecessor's very engine (its page checks that, op for op), so they ran against that one.
  `quantized=True`: a spec that hands such a version quantized weights runs against it too.
- a version whose idea reaches only the requests that ask for it (v19's grammar,
  exports.ASKED_ALONE) runs its own capability's specs only: a request without a grammar runs
  its predecessor's ops one for one (its page checks that), so the others ran where those do.
  Likewise a version whose idea acts only where lanes move (v20, exports.MOVES_ALONE): where no
  lane moves it runs its predecessor's ops one for one, and its page covers the moves.
- `kernel_path=True`: tests a version's own code that runs only where its layers run kernels
  (v15's slice graphs): on CPU under the interpreter; skipped on a GPU, where a GPU spec covers
  it.

Every decision is made at collection, once a (spec, version, page), and kept on the item: a
version left out of the parametrization (needs, until), a parametrization deselected (part,
subject: counted under "deselected", and `--every-version` keeps them), or a skip marker added
(the rest). Before a spec runs only the interpreter setting it was given is applied.
`pytest --why vNN` prints each decision for a version (why.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, fields

import pytest

from spec.support.collection import exports, kernel_mode, parts
from spec.support.collection.selection import impl_of
from torchlet.contract import ALL_CAPABILITIES, OVERLAP, PART_NAMES

MARKER = "spec"

ONE_STEP = ("from v14 a step() call also launches the next step's decode: this spec watches one "
            "step's own work (see spec/test_v14_overlap.py)")


@dataclass(frozen=True)
class Spec:
    """A spec's marker arguments, merged from the module down to the param."""
    needs: str | None = None
    until: str | None = None
    part: tuple[str, ...] = ()
    subject: tuple[str, ...] = ()
    first_with: tuple[str, ...] = ()
    one_step_per_call: bool = False
    engine_parts: bool = False
    kernels: bool = False
    kernel_path: bool = False
    quantized: bool = False


ARGS = tuple(f.name for f in fields(Spec))
HELP = (f"{MARKER}({'=, '.join(ARGS)}=): which versions a spec runs against, and where it is "
        f"skipped (spec/support/collection/rule.py)")


def _names(value) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def spec_of(node) -> Spec:
    """The merged marker of a node (an item or a function's definition), refusing what it
    cannot mean: a misspelt argument, part or capability would leave a spec to run everywhere,
    or nowhere, unnoticed."""
    found: dict = {}
    for marker in node.iter_markers(MARKER):  # closest first
        if marker.args:
            raise pytest.UsageError(f"{node.nodeid}: spec() takes keyword arguments only "
                                    f"({', '.join(ARGS)}); got {marker.args}")
        for key, value in marker.kwargs.items():
            found.setdefault(key, value)
    unknown = sorted(set(found) - set(ARGS))
    if unknown:
        raise pytest.UsageError(f"{node.nodeid}: spec() has no argument {', '.join(unknown)}; "
                                f"it takes {', '.join(ARGS)}")
    for key in ("part", "subject", "first_with"):
        if key in found:
            found[key] = _names(found[key])
    bad = [p for p in found.get("part", ()) if p not in PART_NAMES]
    if "part" in found and (bad or not found["part"]):
        raise pytest.UsageError(f"{node.nodeid}: spec(part=...) takes part names, one or more "
                                f"of {', '.join(PART_NAMES)}; got {list(found['part'])}")
    for key in ("needs", "until"):
        if found.get(key) is not None and found[key] not in ALL_CAPABILITIES:
            raise pytest.UsageError(f"{node.nodeid}: spec({key}={found[key]!r}) names no "
                                    f"capability")
    return Spec(**found)


# --- needs, until: which versions a spec is parametrized with ------------------------------

NOT_PARAMETRIZED = pytest.StashKey[list]()  # (function node id, version, why): for --why


def absent(spec: Spec, version) -> str | None:
    """Why the spec is not parametrized with this version, or None where it is."""
    if spec.needs not in version.capabilities:
        return f"needs {spec.needs}, which {version.name} does not declare"
    if spec.until is not None and spec.until in version.capabilities:
        return f"until {spec.until}: {version.name} declares it, and its idea changes the property"
    return None


def parametrize(metafunc, versions) -> None:
    """Parametrize a spec that takes `impl` with the versions its marker admits, each with its
    version's and capability's markers (`-m v08_paged_gqa_py`, `-m kv_cache`)."""
    spec = spec_of(metafunc.definition)
    if spec.needs is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} takes `impl` but its "
                                f"spec() marker has no needs=")
    left = metafunc.config.stash.setdefault(NOT_PARAMETRIZED, [])
    admitted = []
    for version in versions:
        why = absent(spec, version)
        if why is None:
            admitted.append(version)
        else:
            left.append((metafunc.definition.nodeid, version.name, why))
    params = [pytest.param(v, id=v.name, marks=[getattr(pytest.mark, v.name),
                                                 getattr(pytest.mark, spec.needs)])
              for v in admitted]
    if not params:
        params = [pytest.param(None, id="no-version",
                               marks=pytest.mark.skip(reason=f"no version declares {spec.needs}"))]
    metafunc.parametrize("impl", params, scope="module")


# --- part, subject, first_with, one_step_per_call, engine_parts, kernels, kernel_path --------

@dataclass(frozen=True)
class Decision:
    verdict: str          # RUN, SKIP, or OUT (deselected: not run, counted under "deselected")
    reason: str
    interpret: bool | None = None  # TRITON_INTERPRET for the spec; None: as the process has it


@functools.lru_cache(maxsize=None)  # once a (spec, version, page): the facts read files
def decide(spec: Spec, impl, page: str) -> Decision:
    """The rule for one spec of a page (its file name) against one version (None: a spec that
    takes no version)."""
    if impl is None:
        interpret, _ = kernel_mode.choose(None, page, spec.kernels, spec.kernel_path)
        if spec.kernel_path and interpret is None:
            return Decision("SKIP", kernel_mode.NOT_ON_CPU)
        return Decision("RUN", "takes no version: runs once", interpret)
    held = f"needs {spec.needs}" + (f", until {spec.until}" if spec.until else "")
    if spec.part and not parts.writes(impl, spec.part):
        writers = ", ".join(f"{impl.writer(p)} wrote {p}" for p in spec.part)
        return Decision("OUT", f"part {'/'.join(spec.part)}: {impl.name} takes it unchanged "
                               f"({writers})")
    source = exports.weights_source(impl)
    if source is not None and spec.needs != impl.capabilities[-1] and not spec.quantized:
        return Decision("SKIP", f"{impl.name} changes how weights are held alone: on a float "
                                f"checkpoint it builds {source}'s engine (its page checks this "
                                f"op for op), and this spec ran against {source}")
    source = exports.asked_source(impl)
    if source is not None and spec.needs != impl.capabilities[-1] and not spec.quantized:
        return Decision("SKIP", f"{impl.name}'s idea reaches only the requests that ask for it: "
                                f"without, it runs {source}'s ops one for one (its page checks "
                                f"this), and this spec ran where {source}'s do")
    source = exports.moves_source(impl)
    if source is not None and spec.needs != impl.capabilities[-1] and not spec.quantized:
        return Decision("SKIP", f"{impl.name}'s idea acts only where a lane frees below a held "
                                f"one: where no lane moves it runs {source}'s ops one for one "
                                f"(its page checks this, and covers the moves), and this spec "
                                f"ran where {source}'s do")
    if spec.one_step_per_call and OVERLAP in impl.capabilities:
        return Decision("SKIP", ONE_STEP)
    if spec.engine_parts:
        source = exports.engine_source(impl)
        if source is not None:
            return Decision("SKIP", f"{impl.name} adds kernels alone; on a CPU its engine parts "
                                    f"and layers are {source}'s, and this property ran against "
                                    f"{source}")
    interpret, skip = kernel_mode.choose(impl, page, spec.kernels, spec.kernel_path)
    if skip is not None:
        return Decision("SKIP", skip, interpret)
    if spec.first_with:
        first = exports.first_exporter(impl, spec.first_with)
        if first != impl.name:
            return Decision("SKIP", f"{impl.name} exports {first}'s "
                                    f"{', '.join(spec.first_with)} unchanged: these specs ran "
                                    f"against {first}", interpret)
    if spec.part:
        held += f"; part {'/'.join(spec.part)} written by {impl.name}" \
            if all(impl.writer(p) == impl.name for p in spec.part) else \
            f"; part {'/'.join(spec.part)}: {impl.name} writes one, or has no recipe to say"
    if spec.first_with:
        held += f"; first to export {', '.join(spec.first_with)}"
    if interpret and spec.kernels:
        held += "; its own kernels, interpreted"
    return Decision("RUN", held, interpret)


def tested_before(items: list, specs: dict) -> dict[int, str]:
    """id(item) -> the version that already tests the same objects, for the items whose subject
    objects an earlier parametrization of the same function (the same other parameters) tests."""
    seen, repeats = {}, {}
    for item in items:
        spec, impl = specs[id(item)], impl_of(item)
        if not spec.subject or impl is None:
            continue
        objects = tuple(id(getattr(impl.package, name, None)) for name in spec.subject)
        key = (getattr(item, "function", None), item.callspec.id.replace(impl.name, "", 1),
               objects)
        if key in seen:
            repeats[id(item)] = seen[key]
        else:
            seen[key] = impl.name
    return repeats


DECISION = pytest.StashKey[Decision]()
LEFT_OUT_ITEMS = pytest.StashKey[list]()  # (item, why) the rule deselected: for --why


def apply(config, items: list) -> None:
    """Decide every item once: deselect what is left out, mark skips, keep each decision on its
    item (the interpreter setting, and --why's reasons)."""
    every = config.getoption("--every-version")
    specs = {id(item): spec_of(item) for item in items}
    repeats = {} if every else tested_before(items, specs)
    kept, dropped = [], []
    for item in items:
        spec, impl = specs[id(item)], impl_of(item)
        decision = decide(spec, impl, item.path.name)
        if id(item) in repeats:
            decision = Decision("OUT", f"subject {', '.join(spec.subject)}: the same objects "
                                       f"as {repeats[id(item)]}'s, tested there")
        if decision.verdict == "OUT" and every:
            decision = Decision("RUN", f"--every-version ({decision.reason})")
        item.stash[DECISION] = decision
        if spec.kernels:
            item.add_marker(pytest.mark.kernels)  # `-m kernels` selects them
        if decision.verdict == "SKIP":
            item.add_marker(pytest.mark.skip(reason=decision.reason))
        (dropped if decision.verdict == "OUT" else kept).append(item)
    config.stash[LEFT_OUT_ITEMS] = [(item, item.stash[DECISION].reason) for item in dropped]
    if dropped:
        items[:] = kept
        config.hook.pytest_deselected(items=dropped)
    parts.count_left_out(config, len(dropped))


def before(item) -> None:
    """Before a spec runs: the interpreter setting its decision carries."""
    decision = item.stash.get(DECISION, None)
    if decision is not None:
        kernel_mode.set_interpreter(decision.interpret)
