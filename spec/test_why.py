"""Meta: `pytest --why vNN` says, for every spec, whether it runs against vNN and why.

What it checks: on two pages, `--why v15` lists every spec a collection holds for v15 (its id),
every spec the rule deselects for it (a part's own, which v15 takes unchanged), and every spec
function not parametrized with it (its marker's `until`), each once, as RUN or SKIP with a
reason; the reasons are the rule's own; and nothing runs.
Why: which spec runs for which version is decided by one marker and one rule
(spec/support/collection/rule.py); a reader asking why a spec did not run for their version
gets the answer without reading the rule.
Core principle: the listing is compared with what pytest itself collects, with
`--every-version`, in a child interpreter (the mutants', conftest.py).
Files: spec/support/collection/why.py, spec/support/collection/rule.py, conftest.py.

Also: the rule's own decisions, seen from inside a run: a spec marked `spec(needs=A, until=B)`
is parametrized with no version that lacks A or declares B, and a part's own spec
(`spec(part="kv")`) runs against no version that took the part unchanged. These specs check the
collection that runs them, so a mutant of the rule (spec/mutants/seams.py) breaks them where the
child-interpreter listing above, which imports the reference rule, would not see it.
"""
import re

import pytest

from torchlet.contract import CHUNKED_PREFILL, CONTINUOUS_BATCHING, PAGED_KV

PAGES = ["spec/test_v08_block_pool.py", "spec/test_v04_continuous_batching.py"]
VERSION = "v15_chunked_prefill"
QUIET = ["-q", "-p", "no:randomly", "-p", "no:xdist", "-p", "no:unraisableexception",
         "--no-owned-coverage"]
LINE = re.compile(r"^(RUN |SKIP) (\S+)(?: \((\w+)\))?  (\S.*)$")


@pytest.fixture(scope="module")
def child(request, tmp_path_factory):
    if request.config.getoption("--impl-root"):
        pytest.skip("--why is checked on the reference tree")
    worker, log = request.getfixturevalue("mutants_worker"), tmp_path_factory.mktemp("why") / "log"

    def run(*args):
        rc = worker.pytest([*PAGES, *QUIET, *args], log)
        return rc, log.read_text()
    return run


@pytest.fixture(scope="module")
def listing(child):
    """(exit code, the --why lines as {(node id, version or None): (verdict, reason)}, the
    whole output)."""
    rc, out = child("--why", "v15")
    found = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            key = (m[2], m[3])
            assert key not in found, f"listed twice: {line}"
            found[key] = (m[1].strip(), m[4])
    return rc, found, out


def test_every_spec_for_the_version_is_listed_once_with_a_reason_and_nothing_runs(child, listing):
    rc, found, out = listing
    assert rc == 0, out[-3000:]
    assert not re.search(r"\d+ (passed|failed)", out), out[-3000:]
    _, every = child("--collect-only", "--every-version")
    ids = [line for line in every.splitlines() if "::" in line]
    for_v15 = {i for i in ids if f"[{VERSION}" in i or "[" not in i}
    functions = {i.split("[")[0] for i in ids}
    with_v15 = {i.split("[")[0] for i in for_v15}
    assert for_v15, every[-3000:]
    assert {key[0] for key in found if key[1] is None} == for_v15, out[-3000:]
    assert {key[0] for key in found if key[1] is not None} == functions - with_v15, out[-3000:]
    assert {key[1] for key in found} <= {None, VERSION}
    assert all(reason.strip() for _, reason in found.values())


def test_the_reasons_are_the_rules(listing):
    _, found, out = listing
    pool = [v for (nodeid, _), v in found.items() if "test_v08_block_pool.py" in nodeid]
    # v15 takes v12's kv part unchanged: the pool's own specs are left out for it
    assert pool and all(verdict == "SKIP" and reason.startswith("left out: part kv: "
                                                                   f"{VERSION} takes it unchanged")
                        for verdict, reason in pool), out[-3000:]
    until = [v for (_, version), v in found.items() if version == VERSION]
    # v04's specs of whole prompts (until chunked_prefill: v15 slices them) and of one mixed
    # pass (until decode_lanes): not parametrized with v15
    assert {reason.split(":")[0] for _, reason in until} == \
        {"until chunked_prefill", "until decode_lanes"}, out[-3000:]
    assert all(verdict == "SKIP" for verdict, _ in until), out[-3000:]
    ran = [reason for verdict, reason in found.values() if verdict == "RUN"]
    assert ran and all(r.startswith("needs continuous_batching") for r in ran), out[-3000:]


# --- the rule, seen from the run it collects -------------------------------------------------

@pytest.mark.spec(needs=CONTINUOUS_BATCHING, until=CHUNKED_PREFILL)
def test_a_spec_runs_only_against_the_versions_that_declare_its_needs_and_not_its_until(impl):
    assert CONTINUOUS_BATCHING in impl.capabilities, f"{impl.name} lacks its needs"
    assert CHUNKED_PREFILL not in impl.capabilities, f"{impl.name} declares its until"


@pytest.mark.spec(needs=PAGED_KV, part="kv")
def test_a_parts_own_spec_runs_only_against_the_versions_that_write_the_part(impl, request):
    if request.config.getoption("--every-version"):
        pytest.skip("--every-version runs a part's own specs against every version")
    # a version without a recipe cannot say it took the part: it runs every spec
    assert impl.writer("kv") in (impl.name, None), f"{impl.name} takes {impl.writer('kv')}'s kv"
