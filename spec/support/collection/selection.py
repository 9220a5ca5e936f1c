"""`-k vNN` selects exactly the specs parametrized with that version.

pytest's `-k` matches a word as a substring of every name up the node's chain, so `-k v08` would
also pick v09's ids in spec/test_v08_paged_engine.py, a spec named `..._equal_v08s` run against
v09, and the meta-specs about v08. Here a word of a `-k` expression that names a version (`v08`,
`v01_0`, `v08_paged_gqa_py`; `v01` names both v01_0 and v01_1) is true exactly for the specs whose
`impl` parameter is that version. Every other word keeps pytest's meaning, and the expression
keeps its `and`, `or`, `not` and parentheses: `-k "v08 and tight"` works as it reads.
"""
from __future__ import annotations

import re

import pytest
from _pytest.mark import KeywordMatcher
from _pytest.mark.expression import Expression

VERSION_WORD = re.compile(r"^v\d\d(?:_\d)?(?:_[a-z0-9_]+)?$")


def impl_of(item):
    """The version a collected spec runs against (its `impl` parameter), or None."""
    return item.callspec.params.get("impl") if hasattr(item, "callspec") else None


def versions_named(word: str, names: list[str]) -> set[str] | None:
    """The versions a -k word names, or None when it names none."""
    word = word.lower()
    if not VERSION_WORD.match(word):
        return None
    return {n for n in names if n == word or n.startswith(word + "_")} or None


KEYWORD = pytest.StashKey[str]()  # the -k expression take_keyword took (--why filters by it)


def take_keyword(config) -> str:
    """The -k expression, taken out of pytest's hands: pytest's own -k pass, among the collection
    hooks, then keeps everything, and `select` applies the expression once those hooks have run
    (after syrupy has recorded the whole collection, so that it sees a partial run as partial)."""
    text = config.option.keyword.lstrip()
    config.option.keyword = ""
    config.stash[KEYWORD] = text
    return text


def matches(text: str, names: list[str], words, version: str | None) -> bool:
    """Whether the -k expression `text` keeps a spec of this version whose names `words` answers
    (pytest's KeywordMatcher, or any callable taking a word), version words read as above."""
    def match(word, **kwargs):
        named = versions_named(word, names)
        return words(word, **kwargs) if named is None else version in named

    return Expression.compile(text).evaluate(match)


def select(config, items, names: list[str], text: str) -> None:
    """Apply the -k expression `text` with version words read as above."""
    if not text:
        return
    kept, dropped = [], []
    for item in items:
        version = getattr(impl_of(item), "name", None)
        keep = matches(text, names, KeywordMatcher.from_item(item), version)
        (kept if keep else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
