"""A part's own specs run once, against the version that writes the part.

A version is a recipe (torchlet/contract/recipe.py: Recipe): its predecessor's parts, with the ones its
idea changes swapped. A spec that exercises one part directly or states one part's own property
(the layers' functions and kernels: model; a block pool, the paged metadata: kv; the sampler's
functions; graph capture: runner) says nothing new about a version that took that part unchanged.
It carries `@pytest.mark.part("kv")` (or a module's pytestmark; with several names it concerns
each of them), and its parametrization with a version is deselected, counted in the summary's
"deselected", where the recipe says an earlier version wrote every part it names. It stays where
the version writes one of them, and where the version has no recipe yet (PARTS), which cannot say.

Every other spec observes the assembled engine (token parity against the oracle and the golden
files, the block watch, the lanes, replay, a step's meters, a request's life, bad input) and
runs against every version: a change to any part can break those.

The rule applies before the other plugins see the collection: syrupy counts only the specs that
can run, and `-m <version>` (a mutant's run) and `-k vNN` select among them. A mutant that breaks
a part names the version that writes it, so its part specs still run against the mutated code.
`--every-version` turns the rule off.

A part is coarse: v09, v10 and v13 all write the model, while v08's paged-attention functions
reach them unchanged. A part's spec that tests one named object of a version's package says so
with `@pytest.mark.subject("paged_attention", ...)` (attribute names of the package), and runs
only against the first version, in order, whose package holds those objects: a later version
that re-exports the same module would run the same functions again.
"""
from __future__ import annotations

import functools

import pytest

from spec.support.collection.selection import impl_of
from torchlet.contract import PART_NAMES

MARKER = "part"
HELP = (f"{MARKER}(*names): a part's own spec, run only against the versions whose recipe writes "
        f"one of these parts ({', '.join(PART_NAMES)}; spec/support/collection/parts.py)")


def addoption(parser) -> None:
    parser.addoption("--every-version", action="store_true", default=False,
                     help="run a part's own specs against every version, not only the versions "
                          "that write the part (spec/support/collection/parts.py)")


def parts_of(item) -> tuple[str, ...]:
    """The parts a spec is about, () for an engine-level spec; refuses a name that is no part."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return ()
    unknown = [name for name in marker.args if name not in PART_NAMES]
    if not marker.args or unknown:
        raise pytest.UsageError(f"{item.nodeid}: part() takes part names, one or more of "
                                f"{', '.join(PART_NAMES)}; got {list(marker.args)}")
    return tuple(marker.args)


@functools.lru_cache(maxsize=None)  # a writer is looked up in the tree's listing: once a version
def writes(version, parts: tuple[str, ...]) -> bool:
    """Whether the version writes one of the parts, or has no recipe to say it does not."""
    return any(version.writer(part) in (None, version.name) for part in parts)


def taken_unchanged(item) -> bool:
    """Whether the spec is a part's own and its version took that part from an earlier one."""
    parts = parts_of(item)
    impl = impl_of(item)
    return bool(parts) and impl is not None and not writes(impl, parts)


LEFT_OUT = pytest.StashKey[int]()  # how many parametrizations the rule left out of this run


SUBJECT = "subject"
SUBJECT_HELP = (f"{SUBJECT}(*names): a part's spec that tests these attributes of a version's "
                f"package runs once for each distinct set of objects, against the first version "
                f"that holds it (spec/support/collection/parts.py)")


def tested_before(items: list) -> set[int]:
    """ids of the items whose subject objects an earlier parametrization of the same spec (the
    same other parameters) already tests."""
    seen, repeats = set(), set()
    for item in items:
        marker, impl = item.get_closest_marker(SUBJECT), impl_of(item)
        if marker is None or impl is None:
            continue
        objects = tuple(id(getattr(impl.package, name, None)) for name in marker.args)
        key = (item.module.__name__, item.originalname,
               item.callspec.id.replace(impl.name, "", 1), objects)
        if key in seen:
            repeats.add(id(item))
        seen.add(key)
    return repeats


def deselect(config, items: list) -> None:
    """Drop the parametrizations the rule leaves out, and count them."""
    if config.getoption("--every-version"):
        return
    repeats = tested_before(items)
    dropped = [item for item in items if taken_unchanged(item) or id(item) in repeats]
    if dropped:
        gone = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in gone]
        config.hook.pytest_deselected(items=dropped)
    config.stash[LEFT_OUT] = len(dropped)
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller reads it
        config.workeroutput["parts_left_out"] = len(dropped)


class FromWorkers:
    """Under xdist the workers collect and deselect, each the whole run; the controller reads
    from them how many the rule left out. (Registered only where xdist is: the hook is its.)"""

    def pytest_testnodedown(self, node, error):
        left = getattr(node, "workeroutput", {}).get("parts_left_out", 0)
        node.config.stash[LEFT_OUT] = max(node.config.stash.get(LEFT_OUT, 0), left)


def nothing_left_to_run(session) -> None:
    """A run whose specs are all a part's own, for versions that took the part unchanged
    (`pytest spec/test_v08_block_pool.py -k v09`), has nothing to run, by the rule: it exits 0,
    not with pytest's "no tests collected"."""
    if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and \
            session.config.stash.get(LEFT_OUT, 0):
        session.exitstatus = pytest.ExitCode.OK
