"""The code compare: two versions' effective module sets, file by file.

The repository holds deltas (a version owns only what it changes), but a reader wants the whole
program, so each side is the module set the version runs with (learner.effective_modules). The
diffs are SequenceMatcher groups of our own rendering rather than difflib.HtmlDiff, whose anchor
prefix is a process-wide counter and would make two builds in one process differ."""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from html import escape
from pathlib import Path

from implementations import REFERENCE_ROOT
from torchlet.learner import effective_modules

CONTEXT = 3  # unchanged lines kept around a change; longer stretches fold
NAMED = re.compile(r"implementations/(v\d\w*?)/(\{[^}]*\}|[\w/]+\.py)")


@dataclass
class FileDiff:
    rel: str
    status: str        # added, changed, unchanged, inherited, removed
    old: Path | None
    new: Path | None
    owner: str         # the version whose file the newer side runs


def pairs(names: list[str]) -> list[tuple[str, str]]:
    """Every adjacent pair, then the first against the newest."""
    out = list(zip(names, names[1:]))
    if len(names) > 2:
        out.append((names[0], names[-1]))
    return out


def file_diffs(a: str, b: str, root: Path = REFERENCE_ROOT) -> list[FileDiff]:
    old, new = effective_modules(a, root), effective_modules(b, root)
    found = []
    for rel in sorted(set(old) | set(new)):
        src, dst = old.get(rel), new.get(rel)
        owner = (dst or src).relative_to(Path(root)).parts[0]
        if src is None:
            status = "added"
        elif dst is None:
            status = "removed"
        elif src == dst:
            status = "inherited"
        elif src.read_text() == dst.read_text():
            status = "unchanged"
        else:
            status = "changed"
        found.append(FileDiff(rel, status, src, dst, owner))
    return found


def named_files(version: str, files_sections: list[str]) -> list[str]:
    """Module files of `version` that its page contracts name, in the order they are named."""
    out = []
    for text in files_sections:
        for m in NAMED.finditer(" ".join(text.split())):
            if m.group(1) != version:
                continue
            names = m.group(2).strip("{}").split(",")
            out += [n.strip() for n in names if n.strip() and n.strip() not in out]
    return out


def order_files(diffs: list[FileDiff], named: list[str]) -> list[FileDiff]:
    """Files with a diff to show, the one the page contract names first."""
    shown = [d for d in diffs if d.status in ("added", "changed", "removed")]
    rank = {n: i for i, n in enumerate(named)}
    return sorted(shown, key=lambda d: (rank.get(d.rel, len(rank)), d.rel))


def _lines(path: Path | None) -> list[str]:
    return path.read_text().splitlines() if path else []


def intraline(old: str, new: str) -> tuple[str, str]:
    """Both lines escaped, the characters that differ wrapped in <mark>: within a changed line,
    the reader sees what changed. Lines that share less than half their characters are two
    different lines, not one edited: marking the scraps they share would hide that."""
    a, b = [], []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    if matcher.ratio() < 0.5:
        return escape(old), escape(new)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        left, right = escape(old[i1:i2]), escape(new[j1:j2])
        if tag == "equal":
            a.append(left)
            b.append(right)
            continue
        a.append(f"<mark>{left}</mark>" if left else "")
        b.append(f"<mark>{right}</mark>" if right else "")
    return "".join(a), "".join(b)


def _cell(number, text: str, kind: str, html: str | None = None) -> str:
    num = "" if number is None else str(number)
    body = escape(text) if html is None else html
    return f'<td class="n">{num}</td><td class="{kind}"><pre>{body}</pre></td>'


def _fold(count: int, cols: int) -> str:
    return (f'<tr class="fold"><td colspan="{cols}">… {count} unchanged line'
            f'{"s" if count != 1 else ""} folded …</td></tr>')


def _groups(a: list[str], b: list[str]):
    """(lines folded before the group, group) over SequenceMatcher's grouped opcodes, and the
    lines folded after the last group."""
    groups = list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(CONTEXT))
    at = 0
    for group in groups:
        yield group[0][1] - at, group
        at = group[-1][2]
    yield len(a) - at, None


def side_by_side(a: list[str], b: list[str], fid: str, starts: tuple[int, int] = (1, 1)) -> str:
    """starts: the line numbers of a's and b's first lines (a method's, in its file)."""
    rows, n = [], 0
    for folded, group in _groups(a, b):
        if folded:
            rows.append(_fold(folded, 4))
        if group is None:
            break
        for tag, i1, i2, j1, j2 in group:
            first = True
            for k in range(max(i2 - i1, j2 - j1)):
                left = (starts[0] + i1 + k, a[i1 + k]) if i1 + k < i2 else (None, "")
                right = (starts[1] + j1 + k, b[j1 + k]) if j1 + k < j2 else (None, "")
                mark = ""
                if tag != "equal" and first:
                    mark, n = f' id="{fid}-s{n}" class="change"', n + 1
                first = False
                lk = {"equal": "eq", "replace": "del", "delete": "del", "insert": "empty"}[tag]
                rk = {"equal": "eq", "replace": "ins", "insert": "ins", "delete": "empty"}[tag]
                lk = lk if left[0] is not None else "empty"
                rk = rk if right[0] is not None else "empty"
                marked = (None, None)
                if tag == "replace" and left[0] is not None and right[0] is not None:
                    marked = intraline(left[1], right[1])
                rows.append(f"<tr{mark}>{_cell(*left, lk, marked[0])}"
                            f"{_cell(*right, rk, marked[1])}</tr>")
    return '<table class="sbs">' + "".join(rows) + "</table>"


def unified(a: list[str], b: list[str], fid: str, starts: tuple[int, int] = (1, 1)) -> str:
    """starts: the line numbers of a's and b's first lines."""
    rows, n = [], 0
    da, db = starts[0] - 1, starts[1] - 1
    for folded, group in _groups(a, b):
        if folded:
            rows.append(_fold(folded, 3))
        if group is None:
            break
        for tag, i1, i2, j1, j2 in group:
            mark = ""
            if tag != "equal":
                mark, n = f' id="{fid}-u{n}" class="change"', n + 1
            if tag == "equal":
                for k in range(i2 - i1):
                    rows.append(f'<tr><td class="n">{da + i1 + k + 1}</td><td class="n">'
                                f'{db + j1 + k + 1}</td><td class="eq"><pre> '
                                f'{escape(a[i1 + k])}</pre></td></tr>')
                continue
            olds, news = [escape(a[i1 + k]) for k in range(i2 - i1)], \
                [escape(b[j1 + k]) for k in range(j2 - j1)]
            for k in range(min(len(olds), len(news)) if tag == "replace" else 0):
                olds[k], news[k] = intraline(a[i1 + k], b[j1 + k])
            lines = [(da + i1 + k + 1, None, "-", olds[k], "del") for k in range(i2 - i1)]
            lines += [(None, db + j1 + k + 1, "+", news[k], "ins") for k in range(j2 - j1)]
            for old_n, new_n, sign, html, kind in lines:
                rows.append(f'<tr{mark}><td class="n">{old_n or ""}</td><td class="n">'
                            f'{new_n or ""}</td><td class="{kind}"><pre>{sign}{html}'
                            f'</pre></td></tr>')
                mark = ""
    return '<table class="uni">' + "".join(rows) + "</table>"


def file_id(rel: str) -> str:
    return "f-" + re.sub(r"[^A-Za-z0-9]+", "-", rel).strip("-")


def render_file(d: FileDiff) -> tuple[str, str]:
    """(side-by-side html, unified html) of one file."""
    a, b = _lines(d.old), _lines(d.new)
    fid = file_id(d.rel)
    return side_by_side(a, b, fid), unified(a, b, fid)
