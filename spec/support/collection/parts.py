"""Facts the rule (rule.py) reads for `part` and `subject`, and the run-level side of leaving
specs out. A part's own specs run once, against the version that writes the part.

A version is a recipe (torchlet/contract/recipe.py: Recipe): its predecessor's parts, with the ones its
idea changes swapped. A spec that exercises one part directly or states one part's own property
(the layers' functions and kernels: model; a block pool, the paged metadata: kv; the sampler's
functions; graph capture: runner) says nothing new about a version that took that part unchanged.
It says `@pytest.mark.spec(part="kv")` (or a module's pytestmark; with several names,
`part=("kv", "model")`, it concerns each of them), and its parametrization with a version is deselected, counted in the summary's
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
with `spec(subject=("paged_attention", ...))` (attribute names of the package), and runs
only against the first version, in order, whose package holds those objects: a later version
that re-exports the same module would run the same functions again.
"""
from __future__ import annotations

import functools

import pytest


def addoption(parser) -> None:
    parser.addoption("--every-version", action="store_true", default=False,
                     help="run a part's own specs against every version, not only the versions "
                          "that write the part (spec/support/collection/rule.py)")


@functools.lru_cache(maxsize=None)  # a writer is looked up in the tree's listing: once a version
def writes(version, parts: tuple[str, ...]) -> bool:
    """Whether the version writes one of the parts, or has no recipe to say it does not."""
    return any(version.writer(part) in (None, version.name) for part in parts)


LEFT_OUT = pytest.StashKey[int]()  # how many parametrizations the rule left out of this run


def count_left_out(config, count: int) -> None:
    config.stash[LEFT_OUT] = count
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller reads it
        config.workeroutput["parts_left_out"] = count


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
