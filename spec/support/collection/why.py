"""`pytest --why vNN`: for every spec collected, whether it runs or skips against that version
and why, one line each, then the run ends without running a spec.

    RUN  spec/test_v08_paged_engine.py::test_x[v15_chunked_prefill]  needs paged_kv
    SKIP spec/test_v08_block_pool.py::test_y[v15_chunked_prefill]  left out: part kv: ...
    SKIP spec/test_v12_prefix_cache.py::test_z (v05_decode_lanes)  needs prefix_cache, ...

A spec parametrized with the version is named by its id; one that is not (its marker's needs or
until leaves the version out) by its function and the version in parentheses; a spec that takes
no version runs once, for every version. The reasons are the rule's (rule.py), and any other
skip marker's (a GPU spec on a CPU machine). `vNN` is a version word as `-k` reads it
(selection.py): `v01` names both v01s.
"""
from __future__ import annotations

import pytest
from _pytest.mark import KeywordMatcher
from _pytest.skipping import evaluate_skip_marks

from spec.support.collection import rule
from spec.support.collection.selection import KEYWORD, impl_of, matches, versions_named


def addoption(parser) -> None:
    parser.addoption("--why", metavar="VERSION", default=None,
                     help="print, for every collected spec, whether it runs or skips against "
                          "VERSION (v08, v15_chunked_prefill) and why, then exit without "
                          "running (spec/support/collection/why.py)")


def lines(config, items: list, names: list[str]) -> list[str]:
    """One line per spec, grouped by file in collection order; the specs the rule left out or
    did not parametrize are listed with their file, and filtered by -k as collected ones are."""
    word = config.getoption("--why")
    wanted = versions_named(word, names)
    if wanted is None:
        raise pytest.UsageError(f"--why {word}: names no version of {', '.join(names)}")
    keyword = config.stash.get(KEYWORD, "")
    out = []  # (file, line)
    for item in items:
        impl = impl_of(item)
        if impl is not None and impl.name not in wanted:
            continue
        skip = evaluate_skip_marks(item)
        decision = item.stash.get(rule.DECISION, None)
        if skip is not None:
            out.append((item.nodeid, f"SKIP {item.nodeid}  {skip.reason}"))
        else:
            out.append((item.nodeid, f"RUN  {item.nodeid}  "
                                     f"{decision.reason if decision else 'no rule'}"))
    for item, why in config.stash.get(rule.LEFT_OUT_ITEMS, []):
        version = impl_of(item).name
        if version in wanted and (not keyword or matches(
                keyword, names, KeywordMatcher.from_item(item), version)):
            out.append((item.nodeid, f"SKIP {item.nodeid}  left out: {why}"))
    for nodeid, version, why in config.stash.get(rule.NOT_PARAMETRIZED, []):
        # -k on a spec no item stands for: its file, function and the version's name
        words = [*nodeid.replace("::", "/").split("/"), version]
        if version in wanted and (not keyword or matches(
                keyword, names, lambda k, **_: any(k.lower() in w.lower() for w in words),
                version)):
            out.append((nodeid, f"SKIP {nodeid} ({version})  {why}"))
    files = list(dict.fromkeys(nodeid.split("::")[0] for nodeid, _ in out))
    return [line for _, line in sorted(out, key=lambda o: files.index(o[0].split("::")[0]))]


def report(config, items: list, names: list[str]) -> None:
    """Print the lines, and end the run before any spec runs."""
    text = "\n".join(lines(config, items, names))
    config.get_terminal_writer().line(text)
    items[:] = []  # nothing runs; pytest then exits 5 (no tests ran), which exit() turns to 0
    pytest.exit(f"--why {config.getoption('--why')}: listed, nothing run", returncode=0)
