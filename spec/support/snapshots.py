"""One golden file of generated tokens, shared by every version.

syrupy names a snapshot after the test node, parametrize ids included, which would give each
version its own copy. This extension names a snapshot by the `name=` given at the assertion only,
so the oracle's test and every version's test read the same entry. Only the oracle's test may
write it: version tests skip under --snapshot-update (see test_v00_generation.py).
"""
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
