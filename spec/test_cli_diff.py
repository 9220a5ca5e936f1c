"""`torchlet diff vA vB`: what a version changes, method by method as the site's compare shows it.

What it introduces: a header, then the method view (torchlet/methods.py's as_text, the
site's compare page as text): for each part the two recipes hold differently, each method the
newer part runs against the one it takes the place of. `--files` shows the whole files' diffs
instead, under the same header. The header says which files B owns (and which of A's each
replaces), which files each version between A and B owns, and which files both run unchanged.
Why: the header called every file shown B's own, so `diff v00 v16` said "kept from earlier
versions: -" above the files of six versions; the whole-file view printed 3,047 `+` lines for
v00 -> v16 where the site's method view is the readable one.
Core principle: every version whose code either view shows is named in the header. That is
every version between, with all its files, not only the files still standing by B: B's classes
build on theirs (v16's loop on v14's, whose loop.py v16's replaces), so the method view shows
code from files the effective module set no longer holds. A newer version first, or one version
twice, is refused in one line, never read as changes.
Files: torchlet/learner.py (diff), torchlet/methods.py (as_text), torchlet/docs/site.py
(method_changes).
Tradeoff left visible: the method view imports both versions' packages (a Triton version needs
Triton); where one cannot be imported it says why in one line and points to --files.
"""
from __future__ import annotations

import re

import pytest

from torchlet import cli


@pytest.mark.parametrize("view", [[], ["--files"]], ids=["methods", "files"])
def test_diff_names_in_its_header_every_version_whose_code_it_shows(capsys, view):
    """v00 against v16 showed the files of six versions under a header that named v16 alone
    ("kept from earlier versions: -")."""
    code, (out, err) = cli.main(["diff", "v00", "v16", *view]), capsys.readouterr()
    assert code == 0, err
    head, body = out.split("\n\n", 1)
    shown = {v for line in body.splitlines() if line.startswith(("--- ", "+++ ", "no longer run"))
             for v in re.findall(r"\b(v\d\d\w*)/", line)}
    assert len(shown) > 2 and [v for v in shown if v not in head] == [], head
    assert "changed by the versions between:\n" in head and "the same in both: -" in head


@pytest.mark.parametrize("versions, says", [
    (("v15", "v14"), "v15_chunked_prefill comes after v14_overlap: name the older version first "
                     "(torchlet diff v14_overlap v15_chunked_prefill)"),
    (("v08", "v08"), "v08_paged_gqa_py twice: name two versions, or one to compare with the "
                     "version before it"),
], ids=["reversed", "the same"])
def test_diff_refuses_a_newer_version_first_and_the_same_version_twice(capsys, versions, says):
    """Read as changes, they made v14 "replace" v15's files and v08 replace itself."""
    code, (out, err) = cli.main(["diff", *versions]), capsys.readouterr()
    assert (code, out, err) == (1, "", f"torchlet: error: {says}\n")


def test_diff_shows_the_methods_as_the_site_does_and_the_whole_files_with_files(capsys):
    """Whole new files as `+` lines buried the few methods that change; --files keeps them."""
    code, (methods, err) = cli.main(["diff", "v06"]), capsys.readouterr()
    assert code == 0, err
    assert "\n== inputs: LaneInputs -> StaticInputs\n" in methods
    assert "+++ v06's StaticInputs.write (v06_static_buffers/inputs.py:" in methods
    assert "+++ v06_static_buffers/inputs.py" not in methods
    code, (files, err) = cli.main(["diff", "v06", "--files"]), capsys.readouterr()
    assert code == 0 and "+++ v06_static_buffers/inputs.py" in files
    assert methods.split("\n\n")[0] == files.split("\n\n")[0]  # the same header
