"""One golden file of generated tokens, shared by every version.

syrupy names a snapshot after the test node, parametrize ids included, which would give each
version its own copy. This extension names a snapshot by the `name=` given at the assertion only,
so the oracle's test and every version's test read the same entry. Only the oracle's test may
write it: version tests skip under --snapshot-update (see test_v00_generation.py).

What a run owes the golden files. An entry is shared, so no one spec owns it (syrupy ties an
entry to the tests named like it, and can't say whose it is). Hence:
- a run of the whole suite owes every entry: one that no spec read is stale, and syrupy fails
  the run on it;
- a partial run (`-k v08`, `-m kv_cache`, a file) does not owe the entries it left unread: they
  are other versions' (conftest.py applies -k after syrupy has seen the whole collection, so
  that syrupy knows the run is partial);
- a run against another tree (--impl-root) owes none: only the reference suite can call an
  entry stale (pytest_configure below);
- and in every run, a spec that takes a golden file must read it (pytest_runtest_makereport
  below, per spec, so under any selection and under xdist). syrupy's count could not see a
  version's spec that stopped reading its entry: the oracle's spec reads the same entry.
"""
import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.amber import AmberSnapshotExtension


class GoldenTokens(AmberSnapshotExtension):
    @classmethod
    def get_snapshot_name(cls, *, test_location, index=0) -> str:
        return f"golden_tokens[{index}]"

    @classmethod
    def get_file_basename(cls, *, test_location, index=0) -> str:
        return "golden_tokens"


def render(rows) -> str:
    """One line per prompt, so a diff of the golden file shows which prompt changed."""
    return "\n".join(f"prompt {' '.join(map(str, p))} -> {' '.join(map(str, t))}" for p, t in rows)


class GoldenSamples(GoldenTokens):
    """The seeded samples' golden file, shared by every sampling version; the oracle writes it."""

    @classmethod
    def get_snapshot_name(cls, *, test_location, index=0) -> str:
        return f"golden_samples[{index}]"

    @classmethod
    def get_file_basename(cls, *, test_location, index=0) -> str:
        return "golden_samples"


def render_samples(rows) -> str:
    """One line per (prompt, settings, seed): what was asked and what was drawn."""
    return "\n".join(f"prompt {' '.join(map(str, p))} | t={s.temperature} k={s.top_k} "
                     f"p={s.top_p} min_p={s.min_p} seed={seed} -> {' '.join(map(str, t))}"
                     for p, s, seed, t in rows)


def unread_golden_files(item) -> list[str]:
    """The golden files a spec takes (a fixture of it holds their assertion) and read nothing of."""
    return sorted({value.extension_class.get_file_basename(test_location=value.test_location)
                   for value in getattr(item, "funcargs", {}).values()
                   if isinstance(value, SnapshotAssertion)
                   and issubclass(value.extension_class, GoldenTokens)
                   and not value.num_executions})


def pytest_configure(config):
    if config.getoption("--impl-root", None):
        # The golden files are the reference suite's: a run against another tree only reads them,
        # and only a run of that suite can call an entry stale. Left to syrupy, a learner's tree
        # without the sampling versions would leave the golden samples unused, fail the run and
        # advise --snapshot-update.
        ignored = config.option.ignore_file_extensions or []
        config.option.ignore_file_extensions = [*ignored, GoldenTokens.file_extension]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A spec that takes a golden file and passes without reading it fails."""
    report = yield
    if call.when == "call" and report.passed:
        unread = unread_golden_files(item)
        if unread:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} takes the golden file {', '.join(unread)} but "
                               f"read none of it: a spec that must match a golden entry compared "
                               f"with none")
    return report
