"""Meta: every named property notices its own breakage.

What it checks: each mutant in spec/mutants/ (a small named breakage of the reference, applied to
a copy of implementations/) is killed: at least one spec of the property it breaks fails against
the copy. The table in docs/mutants.md lists every mutant of the set.
Why: a spec that passes on a broken version checks nothing. Running every spec against stubs
(test_meta_stubs.py) only shows that a version with nothing in it fails; a mutant shows that the
one property it breaks is noticed, by the specs named for that property.
Core principle: the mutants are edits of exact source text, so a mutant that no longer matches the
reference fails here instead of silently testing nothing. Each runs only its property's specs,
with -x, in a child interpreter reused across mutants (spec/mutants/worker.py) and the
selection pages' runs (conftest.py: mutants_worker).
Files: spec/mutants/ (the set, the runner, the worker), docs/mutants.md (the table).
Tradeoff left visible: the set is only as good as its mutants. A property with three mutants is
pinned against those three breakages, not against every possible one.
"""
import pytest

from spec.mutants import all_mutants
from spec.mutants.runner import Worker, run
from spec.mutants.table import DOC

MUTANTS = all_mutants()
pytestmark = pytest.mark.mutants


@pytest.fixture(scope="module")
def worker(request):
    if request.config.getoption("--impl-root"):
        pytest.skip("mutants break the reference, not a tree given with --impl-root")
    return request.getfixturevalue("mutants_worker")  # shared with the selection pages


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_mutant_is_killed_by_the_specs_of_the_property_it_breaks(mutant, worker,
                                                                     record_property):
    result = run(mutant, worker)
    record_property("killed_by", result.killer or "")
    assert result.status != "invalid", (
        f"{mutant.name}: its specs could not run against it (a collection error, or no spec "
        f"selected by {mutant.specs} -m '{mutant.markexpr}'):\n{result.log}")
    assert result.killed, (
        f"{mutant.name} ({mutant.why}) survived: {result.ran} spec(s) of {mutant.property} pass "
        f"against it:\n{result.log}")


def test_every_mutant_is_listed_in_the_table_with_its_property_and_version():
    table = DOC.read_text()
    missing = [m.name for m in MUTANTS
               if f"| `{m.name}` | {m.property} | {m.version} |" not in table]
    assert not missing, (f"docs/mutants.md lacks {missing}: rewrite it with "
                         f"`python -m spec.mutants table`")


# The design card's five properties, the block allocator, bad-input atomicity, v11's seeded
# sampling, v12's prefix cache, v13's fusion and dependent launch, v08's preemption, v17's speculative decoding and its batch
# invariance, v18's
# quantized weights and v19's structured output; the host work of a step's outputs; the docs site's pictures (harness
# mutants: they edit torchlet/docs/draw.py); and the server's (torchlet serve) tokens,
# cancellation, refusals and the engine state it reports (harness mutants of torchlet/serve/);
# the bench's anchors, its timing and the targets' verdicts (harness mutants of
# torchlet/bench/); the parts' seams,
# the versions' layout (reference mutants), the spec collection rule and the specs' Triton
# interpreter patching (mutants of spec/support/); and a kernel's hand-over between its own
# programs within one launch (v13's attend_project).
PROPERTIES = ("token parity", "no history recompute", "lane stability", "graph replay",
              "block table invariants", "block allocator", "bad-input atomicity",
              "seeded sampling", "prefix cache", "rotation once per pass", "fusion", "dependent launch",
              "split decode attention", "overlap", "preemption", "chunked prefill", "slice graphs",
              "picture content", "served tokens", "served cancellation", "served refusals",
              "served engine state", "tensor parallelism", "speculative decoding",
              "batch invariance", "anchors", "bench timing", "targets",
              "quantized weights", "structured output", "live lanes", "host work per step", "part seams", "version layout", "spec collection",
              "interpreter patching", "in-launch hand-over")


def test_every_named_property_has_at_least_three_mutants():
    counts = {p: sum(m.property == p for m in MUTANTS) for p in PROPERTIES}
    thin = {p: n for p, n in counts.items() if n < 3}
    assert not thin, f"properties with fewer than three mutants: {thin}"
    unnamed = {m.property for m in MUTANTS} - set(PROPERTIES)
    assert not unnamed, f"mutants of properties this page does not name: {unnamed}"


def test_a_worker_whose_first_run_is_a_harness_mutant_runs_the_reference_after_it(tmp_path):
    """A worker whose first run was a mutant of the spec collection rule executed the edited
    copy before the suite's conftest: kernel_targets read TRITON_INTERPRET unset (every CPU
    kernel spec skipped in every later run, so a kernel's mutant had no spec to run), and
    spec/support's why bound the edited rule (every later `--why` found none of its
    decisions). After such a first run, a kernel's mutant is killed by its CPU kernel spec,
    and the reference's listing comes out whole."""
    by_name = {m.name: m for m in MUTANTS}
    fresh = Worker()
    try:
        assert run(by_name["rule-ignores-until"], fresh).killed
        kernel = run(by_name["v10-fixed-chunk-ignored"], fresh)
        log = tmp_path / "why.log"
        rc = fresh.pytest(["spec/test_v08_block_pool.py", "spec/test_v04_continuous_batching.py",
                           "-q", "-p", "no:xdist", "--no-owned-coverage", "--why", "v15"], log)
    finally:
        fresh.close()
    assert kernel.killed and "cpu-float32" in kernel.killer, (kernel.status, kernel.log)
    out = log.read_text()
    assert rc == 0, out[-3000:]
    assert "no rule" not in out, out[-3000:]
    assert "left out: part kv" in out, out[-3000:]
