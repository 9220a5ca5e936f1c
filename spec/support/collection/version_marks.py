"""A pytest plugin for collect-only runs: after collection, one line per item, its node id and
the version markers it carries (`-p spec.support.collection.version_marks`). One collection then gives what
`-m <version>` would select, for every version at once."""
from __future__ import annotations

import implementations


def pytest_collection_finish(session):
    names = set(implementations.version_names())
    for item in session.items:
        marks = sorted({m.name for m in item.iter_markers()} & names)
        print(f"MARKS {','.join(marks)}\t{item.nodeid}")  # ids may hold spaces
