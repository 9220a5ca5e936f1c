"""Meta: `pytest -k vNN` checks exactly one stage.

What it checks: for every version, the specs `-k <its short id>` selects are exactly the specs
`-m <its full name>` selects, the ones parametrized with it; module names (test_v08_*.py holds
v09's ids too), spec names that mention another version (`..._equal_v08s`) and the meta-specs
about a version (stub runs, mutants) are not selected by it.
Why: a learner who runs `pytest -k v08` on a tree whose v09 builds on their unfinished v08 must
see v08's failures only.
Core principle: both selections are collected by pytest itself, in a child interpreter reused
for every version, and compared as sets of node ids (spec/support/selection.py reads version
words of a -k expression as the `impl` parameter).
Files: spec/support/selection.py, conftest.py.
Tradeoff left visible: a -k word that looks like a version id (v + two digits) can no longer
select by substring; `-k "v08 and tight"` still means both.
"""
import pytest

import implementations
from spec.mutants.runner import Worker

NAMES = implementations.version_names()


@pytest.fixture(scope="module")
def collect(request, tmp_path_factory):
    if request.config.getoption("--impl-root"):
        pytest.skip("selection is checked on the reference tree")
    worker, log = Worker(), tmp_path_factory.mktemp("collect") / "log"

    def ids(*args):
        worker.pytest(["spec", "--collect-only", "-q", "-p", "no:randomly", "-p", "no:xdist",
                       "--no-owned-coverage", *args], log)
        return {line for line in log.read_text().splitlines() if "::" in line
                and not line.startswith("MARKS ")}
    ids.log = log
    yield ids
    worker.close()


@pytest.fixture(scope="module")
def carrying(collect):
    """version -> the node ids that carry its marker (what -m <version> selects), from one
    collection of the whole suite."""
    collect("-p", "spec.support.version_marks")
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


@pytest.mark.parametrize("name", NAMES)
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
