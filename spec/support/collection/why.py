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
from _pytest.skipping import evaluate_skip_marks

from spec.support.collection import rule
from spec.support.collection.selection import impl_of, versions_named


def addoption(parser) -> None:
    parser.addoption("--why", metavar="VERSION", default=None,
                     help="print, for every collected spec, whether it runs or skips against "
                          "VERSION (v08, v15_chunked_prefill) and why, then exit without "
                          "running (spec/support/collection/why.py)")


def lines(config, items: list, names: list[str]) -> list[str]:
    word = config.getoption("--why")
    wanted = versions_named(word, names)
    if wanted is None:
        raise pytest.UsageError(f"--why {word}: names no version of {', '.join(names)}")
    out = []
    for item in items:
        impl = impl_of(item)
        if impl is not None and impl.name not in wanted:
            continue
        skip = evaluate_skip_marks(item)
        decision = item.stash.get(rule.DECISION, None)
        if skip is not None:
            out.append(f"SKIP {item.nodeid}  {skip.reason}")
        else:
            out.append(f"RUN  {item.nodeid}  {decision.reason if decision else 'no rule'}")
    for item, why in config.stash.get(rule.LEFT_OUT_ITEMS, []):
        if impl_of(item).name in wanted:
            out.append(f"SKIP {item.nodeid}  left out: {why}")
    for nodeid, version, why in config.stash.get(rule.NOT_PARAMETRIZED, []):
        if version in wanted:
            out.append(f"SKIP {nodeid} ({version})  {why}")
    return out


def report(config, items: list, names: list[str]) -> None:
    """Print the lines, and end the run before any spec runs."""
    text = "\n".join(lines(config, items, names))
    config.get_terminal_writer().line(text)
    items[:] = []  # nothing runs; pytest then exits 5 (no tests ran), which exit() turns to 0
    pytest.exit(f"--why {config.getoption('--why')}: listed, nothing run", returncode=0)
