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
