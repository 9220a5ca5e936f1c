"""Meta: a part's own specs run once, against the version that writes the part.

What it checks: on a tree of versions whose recipes (PARTS) say who wrote each part, a spec
marked `spec(part="model")` is collected for the versions that write the model and for a version
without a recipe, and deselected for a version that took the model unchanged; a spec with no
part mark (engine-level) is collected for every version; `--every-version` collects both for
every version. A run so narrowed exits 0, naming the specs it left out as deselected, also when
it leaves out all of them, and `-m <the writer>`, as a mutant's run selects, still runs the part
spec.
Why: a version's recipe takes most parts unchanged from its predecessor; running that part's
own specs again for it costs suite time and checks code that already passed them. An engine-level
spec (token parity, the block watch, the lanes, replay, a step's meters) watches how the parts
work together, which any swapped part can break.
Core principle: the reference tree has no recipes yet, so the tree here is made for the test:
four versions that re-export v00's code and declare recipes built with Recipe.first and
Recipe.replace. The real spec page spec/test_v00_layers.py runs against it in a child pytest
(`--impl-root`), and what it collects and runs is read back from its output.
Files: spec/support/collection/rule.py, spec/support/collection/parts.py, conftest.py, the
`spec(part=...)` marks of spec/test_v*.py.
Tradeoff left visible: a part is the unit; a version that writes the model runs every model
spec, also those of the model's functions it took unchanged (v10 runs v09's kernel specs).
"""
import re

import pytest


QUIET = ["-q", "-p", "no:randomly", "-p", "no:xdist", "-p", "no:unraisableexception",
         "--no-owned-coverage"]
PAGE = "spec/test_v00_layers.py"
PART_SPEC = "test_rms_norm_equals_hf"            # spec(part="model")
ENGINE_SPEC = "test_whole_model_logits_equal_hf"  # no part mark

SOURCE = '''from implementations.v00_full_recompute import CAPABILITIES, OPTIONS, build, layers
{recipe}
'''
RECIPES = {
    "v00_first": 'from torchlet.contract import Recipe\n'
                 'PARTS = Recipe.first("v00", model=layers, loop=build)',
    "v01_loop": 'from ..v00_first import PARTS as PREVIOUS\n'
                'PARTS = PREVIOUS.replace("v01", loop=build)',
    "v02_model": 'from ..v01_loop import PARTS as PREVIOUS\n'
                 'PARTS = PREVIOUS.replace("v02", model=layers)',
    "v03_bare": '',  # no recipe yet: it runs every spec
}
WRITERS = {"v00_first", "v02_model", "v03_bare"}  # of the model, or can't say


@pytest.fixture(scope="module")
def tree(request, tmp_path_factory):
    if request.config.getoption("--impl-root"):
        pytest.skip("the rule is checked on a tree made here")
    root = tmp_path_factory.mktemp("recipes") / "implementations"
    root.mkdir()
    (root / "__init__.py").write_text('"""Versions with recipes, for spec/test_part_selection.py."""\n')
    for name, recipe in RECIPES.items():
        (root / name).mkdir()
        (root / name / "__init__.py").write_text(SOURCE.format(recipe=recipe))
    return root


@pytest.fixture(scope="module")
def pytest_run(tree, tmp_path_factory, mutants_worker):
    """pytest in a child interpreter (the mutants', conftest.py), against the tree: (exit code,
    output)."""
    log = tmp_path_factory.mktemp("log") / "log"

    def run(*args, page=PAGE):
        rc = mutants_worker.pytest([page, f"--impl-root={tree}", *QUIET, *args], log)
        return rc, log.read_text()
    return run


def versions_of(out: str, spec: str) -> set[str]:
    """The versions a collection holds the spec for: its ids' last parameter."""
    return {m[1] for m in re.finditer(rf"::{spec}\[(?:[^\]]*-)?(v\d\d_\w+)\]", out)}


def summary(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_a_part_spec_is_collected_for_the_versions_that_write_the_part_and_an_engine_spec_for_all(
        pytest_run):
    rc, out = pytest_run("--collect-only")
    assert rc == 0, out[-3000:]
    assert versions_of(out, PART_SPEC) == WRITERS, out[-3000:]
    assert versions_of(out, ENGINE_SPEC) == set(RECIPES), out[-3000:]
    assert re.search(r"\d+/\d+ tests collected \(\d+ deselected\)", out), out[-3000:]
    rc, out = pytest_run("--collect-only", "--every-version")
    assert rc == 0, out[-3000:]
    assert versions_of(out, PART_SPEC) == versions_of(out, ENGINE_SPEC) == set(RECIPES), \
        out[-3000:]
    assert "deselected" not in summary(out), out[-3000:]


def test_a_run_for_a_version_that_took_the_part_runs_its_engine_specs_and_exits_0(pytest_run):
    rc, out = pytest_run("-k", "v01")
    assert rc == 0, out[-3000:]
    # the engine spec, once per fixture; the part specs deselected, neither failed nor skipped
    assert re.fullmatch(r"2 passed, \d+ deselected(, \d+ warnings?)? in [\d.]+s", summary(out)), \
        out[-3000:]
    rc, out = pytest_run("-k", f"v01 and {PART_SPEC}")
    assert rc == 0, out[-3000:]  # nothing is left to run, by the rule: not an error
    assert re.fullmatch(r"\d+ deselected(, \d+ warnings?)? in [\d.]+s", summary(out)), out[-3000:]


def test_a_mutants_run_of_the_writer_runs_the_part_spec(pytest_run):
    """A mutant selects its specs by node id and `-m` with the version it breaks, the one that
    writes the part."""
    rc, out = pytest_run("-m", "v02_model", page=f"{PAGE}::{PART_SPEC}")
    assert rc == 0, out[-3000:]
    assert re.fullmatch(r"2 passed, \d+ deselected(, \d+ warnings?)? in [\d.]+s", summary(out)), \
        out[-3000:]  # once per fixture, against v02_model alone


def test_a_spec_marker_refuses_what_it_cannot_mean():
    """A misspelt part, argument or capability would leave a spec to run everywhere, or nowhere,
    unnoticed."""
    from spec.support.collection import rule

    class Item:
        nodeid = "spec/test_x.py::test_y"

        def __init__(self, **kwargs):
            self.mark = pytest.mark.spec(**kwargs).mark

        def iter_markers(self, name):
            return [self.mark] if name == rule.MARKER else []

    assert rule.spec_of(Item(part=("kv", "model"))).part == ("kv", "model")
    assert rule.spec_of(Item(part="kv")).part == ("kv",)
    for bad in ("kv_cache", ()):
        with pytest.raises(pytest.UsageError, match="part names"):
            rule.spec_of(Item(part=bad))
    with pytest.raises(pytest.UsageError, match="no argument watches_one_step"):
        rule.spec_of(Item(watches_one_step=True))
    with pytest.raises(pytest.UsageError, match="names no capability"):
        rule.spec_of(Item(needs="paged"))
