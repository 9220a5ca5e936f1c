"""How much of the versions' code is copied from one version into another.

The measure (issue 11's): a line counts as duplicated when it lies in a run of RUN or more
consecutive lines that stands, identical, in another version's files too. Lines are compared
stripped of indentation and trailing space; blank lines, comments, import lines and lone
brackets are left out first, so a run is real code. The share is duplicated lines over
all lines counted, over every `*.py` file of every version under the tree.

    python -m torchlet.duplication [ROOT]   # prints the share and the most copied files
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

RUN = 6


def code_lines(path: Path) -> list[str]:
    out = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line in ("(", ")", "[", "]", "{", "}", "),", "],"):
            continue
        if line.startswith(("import ", "from ")):
            continue
        out.append(line)
    return out


def measure(root: Path) -> tuple[int, int, Counter]:
    """(duplicated lines, lines counted, duplicated lines per file)."""
    import implementations

    versions = implementations.version_names(root)
    files = {v: {p: code_lines(p) for p in sorted((Path(root) / v).rglob("*.py"))}
             for v in versions}
    windows = {v: {tuple(lines[i:i + RUN]) for lines in fs.values()
                   for i in range(len(lines) - RUN + 1)} for v, fs in files.items()}
    owners: dict[tuple, set[str]] = {}
    for v, ws in windows.items():
        for w in ws:
            owners.setdefault(w, set()).add(v)
    duplicated, total, per_file = 0, 0, Counter()
    for v, fs in files.items():
        for path, lines in fs.items():
            marked = [False] * len(lines)
            for i in range(len(lines) - RUN + 1):
                if len(owners[tuple(lines[i:i + RUN])]) > 1:
                    marked[i:i + RUN] = [True] * RUN
            total += len(lines)
            duplicated += sum(marked)
            if any(marked):
                per_file[str(path.relative_to(root))] = sum(marked)
    return duplicated, total, per_file


def main(argv=None) -> int:
    import implementations

    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else implementations.REFERENCE_ROOT
    duplicated, total, per_file = measure(root)
    print(f"{duplicated} of {total} code lines ({100 * duplicated / max(total, 1):.1f}%) lie in "
          f"runs of {RUN}+ lines that another version holds too")
    for name, n in per_file.most_common(10):
        print(f"  {n:5d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
