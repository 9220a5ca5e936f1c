"""Meta: `pytest -k vNN` checks exactly one stage.

What it checks: for every version, the specs `-k <its short id>` selects are exactly the specs
`-m <its full name>` selects, the ones parametrized with it; module names (test_v08_*.py holds
v09's ids too), spec names that mention another version (`..._equal_v08s`) and the meta-specs
about a version (stub runs, mutants) are not selected by it.
Why: a learner who runs `pytest -k v08` on a tree whose v09 builds on their unfinished v08 must
see v08's failures only.
Core principle: both selections are collected by pytest itself, in a child interpreter reused
for every version, and compared as sets of node ids (spec/support/collection/selection.py reads version
words of a -k expression as the `impl` parameter).
And a run so selected exits 0 when every spec it ran passed: the golden files are shared by
every version, and the entries only other versions read are not its business; but a spec it
ran that takes a golden file and reads none of it still fails the run.
A part's own specs run only against the versions that write the part (spec/support/collection/parts.py,
spec/test_part_selection.py): the specs a mutant names still run against the versions it names,
and a version's own pages keep specs that run against it (what `torchlet check` runs).
Files: spec/support/collection/selection.py, conftest.py, spec/support/checks/snapshots.py.
Tradeoff left visible: a -k word that looks like a version id (v + two digits) can no longer
select by substring; `-k "v08 and tight"` still means both.
"""
import re
from pathlib import Path

import pytest

import implementations
from spec.mutants import all_mutants
from torchlet import learner
from torchlet.contract import SAMPLING

NAMES = implementations.version_names()
GOLDEN = sorted((Path(__file__).parent / "__snapshots__").glob("*.ambr"))
# Versions before sampling read the golden tokens but not the golden samples.
UNSAMPLED = [v.name for v in implementations.discover() if SAMPLING not in v.capabilities]


# Options of every child run here: no unraisable-exception check, whose five gc passes at the end
# of a run cost seconds in an interpreter that holds torch and the whole collection.
QUIET = ["-q", "-p", "no:randomly", "-p", "no:xdist", "-p", "no:unraisableexception"]


@pytest.fixture(scope="module")
def worker(request):
    """One child interpreter for every pytest run of this page: the mutants' (conftest.py)."""
    if request.config.getoption("--impl-root"):
        pytest.skip("selection is checked on the reference tree")
    return request.getfixturevalue("mutants_worker")


@pytest.fixture(scope="module")
def collect(worker, tmp_path_factory):
    log = tmp_path_factory.mktemp("collect") / "log"

    def ids(*args):
        worker.pytest(["spec", "--collect-only", *QUIET, "--no-owned-coverage", *args], log)
        return {line for line in log.read_text().splitlines() if "::" in line
                and not line.startswith("MARKS ")}
    ids.log = log
    return ids


@pytest.fixture(scope="module")
def carrying(collect):
    """version -> the node ids that carry its marker (what -m <version> selects), from one
    collection of the whole suite."""
    collect("-p", "spec.support.collection.version_marks")
    marked: dict[str, set[str]] = {name: set() for name in NAMES}
    for line in collect.log.read_text().splitlines():
        if line.startswith("MARKS "):
            names, nodeid = line[len("MARKS "):].split("\t", 1)
            for name in filter(None, names.split(",")):
                marked[name].add(nodeid)
    return marked


def short(name: str) -> str:
    number = implementations.VERSION_DIR.match(name)
    return f"v{number.group(1)}" + (f"_{number.group(2)}" if number.group(2) else "")


# Each -k is a collection of the whole suite (about 1 s of a core): the ids whose words could
# meet another's, not all of them. v00 first; v01_0 and v01_1 share "v01"; v02 and v20 the same
# digits; v1x's first and last beside v10-v19, the newest (v20 and later) beside them.
K_NAMES = [n for n in NAMES if short(n) in {"v00", "v01_0", "v01_1", "v02", "v10", "v19"}] + \
    [n for n in NAMES if short(n) >= "v20"]


@pytest.mark.parametrize("name", K_NAMES)
def test_k_with_a_version_id_selects_exactly_the_specs_parametrized_with_it(collect, carrying,
                                                                           name):
    if name == NAMES[0]:  # once: the markers are what -m selects
        assert carrying[name] == collect("-m", name)
    carrying = carrying[name]
    selected = collect("-k", short(name))
    assert carrying, f"no spec is parametrized with {name}"
    assert selected == carrying, (
        f"-k {short(name)}: {len(selected - carrying)} extra, e.g. "
        f"{sorted(selected - carrying)[:3]}; {len(carrying - selected)} missing, e.g. "
        f"{sorted(carrying - selected)[:3]}")


def test_k_with_a_major_number_selects_every_version_of_it_and_words_keep_their_meaning(collect):
    both = collect("-m", "v01_0_ragged_batch or v01_1_split_gqa")
    assert collect("-k", "v01") == both
    tight = collect("-k", "v08 and tight")
    assert tight and all("tight" in i and "[v08_paged_gqa_py" in i for i in tight)



def runs(ids: set[str], spec: str) -> bool:
    """Whether a node id or module path, as a mutant names its specs, selects one of ids."""
    return any(i == spec or i.startswith((spec + "[", spec + "::")) for i in ids)


def test_every_spec_a_mutant_names_runs_against_a_version_it_names(carrying):
    """A mutant breaks a part of the version it names, which writes that part: the part's own
    specs, which run only against the versions that write it, still run against the mutant."""
    versioned = [m for m in all_mutants() if m.markexpr]  # a harness mutant names no version
    lost = [f"{m.name}: {spec} ({m.markexpr})" for m in versioned for spec in m.specs
            if not runs(set().union(*(carrying[n] for n in m.markexpr.split(" or "))), spec)]
    assert not lost, "specs that run against none of their mutant's versions:\n" + "\n".join(lost)


def test_every_versions_own_pages_keep_specs_that_run_against_it(carrying):
    """`torchlet check -k vNN` runs the version's own pages against a learner's tree."""
    empty = [name for name in NAMES if (pages := learner.spec_modules(name))
             and not any(runs(carrying[name], f"spec/{page.name}") for page in pages)]
    assert not empty, f"versions whose own pages run nothing against them: {empty}"

@pytest.mark.parametrize("name", sorted({UNSAMPLED[0], UNSAMPLED[-1]}))
def test_k_with_a_version_id_exits_0_when_its_specs_pass_and_others_golden_entries_go_unread(
        worker, tmp_path, name):
    """Collected from testpaths as the README's `pytest -k vNN` is, but from the golden tokens'
    page alone, so that it costs one page: the version reads the golden tokens, and the golden
    samples are left to the sampling versions."""
    log = tmp_path / "log"
    rc = worker.pytest(["-o", "testpaths=spec/test_v00_generation.py", "-k", short(name), *QUIET,
                        "--no-owned-coverage"], log)
    out = log.read_text()
    summary = out.strip().splitlines()[-1]
    entries = sum(path.read_text().count("\n# name: ") for path in GOLDEN)
    read = re.search(r"^(\d+) snapshots? passed\.$", out, re.M)
    assert rc == 0, out[-3000:]
    # GPU specs of the page skip on a CPU; nothing fails or errors
    assert re.fullmatch(r"\d+ passed(, \d+ skipped)?, \d+ deselected(, \d+ warnings?)? in [\d.]+s",
                        summary), \
        out[-3000:]
    assert read and 0 < int(read[1]) < entries, out[-3000:]  # the golden files, read in part
    assert "unused" not in out and "--snapshot-update" not in out, out[-3000:]


GOLDEN_READERS = """
import pytest
from spec.support.checks.snapshots import GoldenTokens

@pytest.fixture
def golden(snapshot):
    return snapshot.use_extension(GoldenTokens)

@pytest.mark.parametrize("key", ["left", "right"])
def test_reads_its_entry(golden, key):
    assert f"rows of {key}" == golden(name=key)

def test_takes_the_golden_file_and_passes_without_reading_it(golden):
    pass
"""


def test_a_spec_that_takes_a_golden_file_and_reads_none_of_it_fails_a_partial_run(worker,
                                                                                  tmp_path):
    """In a suite of its own, with the golden files' extension and check (spec/support/
    snapshots.py): its golden file written by its readers, then runs of part of it."""
    (tmp_path / "test_golden_readers.py").write_text(GOLDEN_READERS)
    log = tmp_path / "log"

    def run(*args):
        return worker.pytest([str(tmp_path), "-p", "spec.support.checks.snapshots", *QUIET, *args], log)

    assert run("-k", "reads_its_entry", "--snapshot-update") == 0, log.read_text()[-3000:]
    assert run("-k", "reads_its_entry and left") == 0, log.read_text()[-3000:]
    assert "\n1 snapshot passed.\n" in log.read_text(), log.read_text()[-3000:]  # right: unread
    assert run("-k", "without_reading") == 1, log.read_text()[-3000:]
    out = log.read_text()
    assert "takes the golden file golden_tokens but read none of it" in out, out[-3000:]
    assert re.fullmatch(r"1 failed, 2 deselected(, \d+ warnings?)? in [\d.]+s",
                        out.strip().splitlines()[-1]), out[-3000:]
