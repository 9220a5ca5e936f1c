"""docs/mutants.md: every mutant, the property it breaks, the version it edits, and the spec
that killed it on the last full run."""
from __future__ import annotations

import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "mutants.md"

HEAD = """# Mutants

Each row is a small deliberate breakage of the reference (spec/mutants/), applied to a copy of
`implementations/` (of `torchlet/` for a harness mutant, of `spec/support/` for one of the
specs' machinery), and the spec that noticed it. The suite runs every mutant (`pytest -m mutants`)
and fails when one survives. This table was written by `python -m spec.mutants table` on {date}:
{killed} of {total} mutants killed.

| mutant | property | version | what it breaks | killed by |
| --- | --- | --- | --- | --- |
"""


def write_table(results) -> Path:
    rows = [HEAD.format(date=datetime.date.today().isoformat(), total=len(results),
                        killed=sum(r.killed for r in results))]
    for r in results:
        m = r.mutant
        killer = f"`{r.killer}`" if r.killer else f"**{r.status}**"
        rows.append(f"| `{m.name}` | {m.property} | {m.version} | {m.why} | {killer} |\n")
    DOC.write_text("".join(rows) + after_the_table())
    return DOC


def after_the_table() -> str:
    """What the doc holds after the table (the purchase lists, written by hand), kept as is."""
    if not DOC.exists():
        return ""
    lines = DOC.read_text().splitlines(keepends=True)
    end = next((i for i, line in enumerate(lines) if line.startswith("| mutant |")), len(lines))
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[end:])
