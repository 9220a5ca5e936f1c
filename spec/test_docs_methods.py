"""The compare page's method view: a swapped part, method by method.

What it introduces: the Methods section of each compare page (torchlet/methods.py, drawn by
torchlet/docs/site.py): for each part the two recipes (PARTS) hold differently, each method the
newer part runs beside the one of the older part it takes the place of, side by side, or alone.
Why: a version's idea is usually a method or two of one part; shown as whole files (a new
inputs.py, a new kv.py) the reader has to find them, and a rewritten part's renamed method
(v05's `place` where v04's runner called `allocate`) reads as one file removed, one added.
Core principle: the spec derives each pairing from the recipe and the sources on its own (the
methods a swapped part's class defines that the older part has; for a rewritten part, the method
a caller now calls where it called the older one), builds the site's compare page for the pair,
and finds the two methods' names and their source lines side by side in it.
Files: torchlet/methods.py, torchlet/docs/site.py; spec/mutants/pictures.py breaks the pairing.
Tradeoff left visible: a differently named method is paired only where a caller's changed line
shows the swap; one no caller names is shown alone, as an addition.
"""
from __future__ import annotations

import functools
import inspect
import textwrap
from html.parser import HTMLParser

import implementations
from torchlet import methods
from torchlet.docs import site


class Methods(HTMLParser):
    """Each div.method of a page: its data- attributes, its heading's text and its table's rows
    as (left text, right text): side by side, or a method alone's lines as its right side."""

    def __init__(self, text: str):
        super().__init__()
        self.found: list[dict] = []
        self._cells: list[str] | None = None
        self._cell = self._head = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div" and attrs.get("class") == "method":
            self.found.append({"new": attrs["data-new"], "old": attrs["data-old"],
                               "part": attrs["data-part"], "title": "", "rows": []})
        elif not self.found:
            return
        elif tag == "h4":
            self._head = True
        elif tag == "tr":
            self._cells = []
        elif tag == "td" and self._cells is not None:
            self._cell = attrs.get("class", "")
            self._cells.append("")

    def handle_endtag(self, tag):
        if tag == "h4":
            self._head = False
        elif tag == "tr" and self._cells is not None:
            if len(self._cells) == 4:  # number, text, number, text; a fold is one cell
                self.found[-1]["rows"].append((self._cells[1], self._cells[3]))
            elif len(self._cells) == 3:  # a method alone: two numbers, "+" and its line
                self.found[-1]["rows"].append(("", self._cells[2][1:]))
            self._cells = None
        elif tag == "td":
            self._cell = None

    def handle_data(self, data):
        if self._head:
            self.found[-1]["title"] += data
        elif self._cell is not None and self._cells:
            self._cells[-1] += data


@functools.lru_cache(maxsize=None)
def compare_page(a: str, b: str) -> list[dict]:
    """The method view of the compare page the site writes for versions a and b (its file
    views left out: site.write_site adds them, and the whole site takes seconds to build)."""
    names = implementations.version_names()
    old, new = (next(n for n in names if n.startswith(v + "_")) for v in (a, b))
    changes, why = methods.method_changes(old, new, implementations.REFERENCE_ROOT)
    assert not why, why
    return Methods(site.compare_html(old, new, [], [], changes)).found


def source(fn) -> list[str]:
    return textwrap.dedent(inspect.getsource(inspect.unwrap(fn))).splitlines()


def shown(entry: dict, side: int) -> list[str]:
    return [row[side] for row in entry["rows"] if row[side] != ""]


def find(found: list[dict], new: str, old: str = "") -> dict:
    hits = [e for e in found if e["new"] == new]
    assert hits, f"no method view of {new}; shown: {[e['new'] for e in found]}"
    assert hits[0]["old"] == old, f"{new} is set beside {hits[0]['old']!r}, not {old!r}"
    return hits[0]


def test_a_swapped_parts_override_is_shown_beside_the_method_it_overrides():
    """v06 swaps `inputs`: each method StaticInputs defines that LaneInputs has too stands
    beside LaneInputs' own, the older source on the left and the newer on the right, and the
    methods LaneInputs lacks stand alone."""
    before, after = implementations.load("v05"), implementations.load("v06")
    assert after.recipe.swapped() == ("inputs",)
    old, new = before.recipe.parts["inputs"], after.recipe.parts["inputs"]
    own = [n for n, v in vars(new).items() if inspect.isfunction(v)]
    found = compare_page("v05", "v06")
    for name in own:
        overridden = inspect.isfunction(getattr(old, name, None))
        entry = find(found, f"{after.name}:{new.__name__}.{name}",
                     f"{before.name}:{old.__name__}.{name}" if overridden else "")
        right = shown(entry, 1)
        assert right[0] == source(getattr(new, name))[0] and set(right) <= set(
            source(getattr(new, name))), f"{name}: the right side is not {new.__name__}'s"
        left = shown(entry, 0)
        if overridden:
            assert left[0] == source(getattr(old, name))[0] and set(left) <= set(
                source(getattr(old, name))), f"{name}: the left side is not {old.__name__}'s"
            assert f"{new.__name__}.{name} in place of" in entry["title"]
        else:
            assert left == [] and entry["title"].endswith("new in the part")
    assert {e["new"].split(".")[-1] for e in found} == set(own)


def test_a_composed_parts_swapped_ops_are_paired_method_by_method():
    """v09 swaps the model, a decoder composing v08's memory with its own ops: TritonOps'
    rms_norm stands beside the rms_norm the older ops ran (named by the class that holds it)."""
    before, after = implementations.load("v08"), implementations.load("v09")
    old_ops, new_ops = before.recipe.parts["model"].ops, after.recipe.parts["model"].ops
    holder = next(k for k in type(old_ops).__mro__ if "rms_norm" in vars(k))
    written = type(old_ops).rms_norm.__module__.split(".")[1]  # the version whose file has it
    entry = find(compare_page("v08", "v09"), f"{after.name}:TritonOps.rms_norm",
                 f"{written}:{holder.__name__}.rms_norm")
    assert shown(entry, 1)[0] == source(type(new_ops).rms_norm)[0]


def test_a_rewritten_parts_method_is_paired_with_the_one_its_callers_called_before():
    """v05 rewrites the kv part (LaneKV is no KVCache): where v04's runner called the cache's
    allocate, v05's calls place, so LaneKV.place stands beside KVCache.allocate."""
    before, after = implementations.load("v04"), implementations.load("v05")
    old_runner, new_runner = before.recipe.parts["runner"], after.recipe.parts["runner"]
    assert ".allocate(" in inspect.getsource(old_runner.prefill)
    assert ".place(" in inspect.getsource(new_runner.prefill)
    assert ".allocate(" not in inspect.getsource(new_runner.prefill)
    old_kv, new_kv = before.recipe.parts["kv"], after.recipe.parts["kv"]
    assert not issubclass(new_kv, old_kv) and not hasattr(new_kv, "allocate")
    entry = find(compare_page("v04", "v05"), f"{after.name}:{new_kv.__name__}.place",
                 f"{before.writer('kv')}:{old_kv.__name__}.allocate")
    assert shown(entry, 0)[0] == source(old_kv.allocate)[0]
    assert shown(entry, 1)[0] == source(new_kv.place)[0]
