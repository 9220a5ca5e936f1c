"""The documentation site, generated from the specs.

What it introduces: `torchlet docs build [--out DIR] [--results junit.xml]`, a static site: the
version map, which links the parts page (docs/parts.md: each part's Protocols, the versions that
write it, one token through a v16 decode step) before any version, one page per version (its
spec modules' page contracts and their specs, and its recipe: a table of the parts its engine is
assembled from, each with what it is, the version that wrote it and its file, the parts the
version swaps highlighted, each part's name a link to the Protocol it satisfies there, on the
parts page) and a code compare for every adjacent pair of versions and for the first against the
newest; every reader document of docs/ as a page the index links, and each file a page contract
names linked to its source page.
Why: the page contracts are spec module docstrings, which a reader otherwise sees only in an
editor; generated from the executable specs, a page cannot claim what its specs do not check.
Core principle: the site is a pure function of the tree: every page follows the contract (a
missing section fails the build, naming the version and the section), every link resolves to a
file of the site (the sources it links to are pages of it, with an id per line), so it works
served or opened as files, a page lists as specs what pytest collects, and two builds are
byte-identical.
Files: torchlet/docs/{pages.py, compare.py, site.py, markdown.py, __init__.py}, docs/parts.md
and what generates its tables and its walk (torchlet/docs/{parts_doc.py, walk.py}),
torchlet/parts.py (the recipe's rows); the pictures (torchlet/docs/{scenarios, record, draw,
pictures}.py) have their own page, spec/test_docs_pictures.py, and so has the compare pages'
method view (torchlet/docs/methods.py), spec/test_docs_methods.py; spec/test_docs_browser.py
opens the same site in a real browser.
Tradeoff left visible: spec counts are test functions, not parametrizations, because counting
those needs pytest's collection; and the status shown is only as fresh as the last JUnit file
(without one, the index says how to make it and no spec is marked). The parts page's walk is
one steady step of one request on the tiny fixture, graphs off: an admission, a preemption or a
prefill slice is not in it.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import re
import shutil
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag

import pytest

import implementations
from torchlet import docs
from torchlet.contract import PART_NAMES, PROTOCOLS, protocol_of
from torchlet.docs import DOCS_DIR, markdown, parts_doc
from torchlet.docs.pages import SECTIONS, MissingSectionError, version_pages
from torchlet.docs.site import index_html, load_results, version_html
from torchlet.learner import REPO, SPEC_DIR, effective_modules
from torchlet.parts import recipe_rows
from spec.support.inputs.recipe_tree import ROWS, write_recipe_tree

VERSIONS = implementations.version_names()


class Page(HTMLParser):
    """The ids, links, h3 headings and text of one HTML file."""

    def __init__(self, text: str):
        super().__init__()
        self.ids, self.links, self.h3, self.text = set(), [], [], []
        self._in_h3 = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])
        self._in_h3 = tag == "h3"
        if tag == "h3":
            self.h3.append("")

    def handle_endtag(self, tag):
        if tag == "h3":
            self._in_h3 = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_h3:
            self.h3[-1] += data


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="spec.test_v02_kv_cache"
  name="test_decode_ignores_the_history_token_ids_it_is_given[v02_kv_cache]"/>
<testcase classname="spec.test_v02_kv_cache"
  name="test_decode_reads_the_cache_so_a_cache_from_another_history_changes_the_output[v02_kv_cache]">
  <failure message="assert 1 == 2">boom</failure></testcase>
<testcase classname="spec.test_v02_kv_cache"
  name="test_the_cache_holds_the_keys_and_values_hf_computes_from_scratch[v02_kv_cache-qwen2]">
  <skipped message="no oracle"/></testcase>
</testsuite></testsuites>
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A JUnit file of three of v02's specs: one passed, one failed, one skipped."""
    xml = tmp_path_factory.mktemp("results") / "junit.xml"
    xml.write_text(JUNIT)
    return xml


@pytest.fixture(scope="module")
def built(tmp_path_factory, results) -> tuple[Path, int]:
    """The reference site as `torchlet docs build --out DIR --results FILE` writes it, and the
    command's exit code: the specs of this page that read the reference site, the JUnit file's
    and the command's included, read this one build (a build runs every version's pictures,
    seconds of CPU), and test_two_builds_are_byte_identical builds it again."""
    from torchlet import cli

    out = tmp_path_factory.mktemp("site") / "a"
    return out, cli.main(["docs", "build", "--out", str(out), "--results", str(results)])


@pytest.fixture(scope="module")
def site(built) -> Path:
    return built[0]


def parsed(path: Path) -> Page:
    return Page(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def html(site) -> dict[Path, Page]:
    """Every page of the site, parsed once: resolved path -> Page."""
    return {p.resolve(): parsed(p) for p in sorted(site.rglob("*.html"))}


def test_every_version_has_a_page_with_the_five_sections(site):
    for name, page in zip(VERSIONS, version_pages()):
        html = parsed(site / "versions" / f"{name}.html")
        for part in page.parts:
            for _, heading in SECTIONS:
                assert heading in html.h3, f"{name}: no '{heading}' heading"
        assert html.h3.count("Core principle") == len(page.parts) >= 1


def test_every_link_resolves_to_a_file_in_the_site_and_every_anchor_to_an_id(site, html):
    """A link out of the site 404s under `python -m http.server -d docs/_site`, and an anchor
    into a .py file jumps nowhere, so every link stays inside the site, on a page that has it."""
    root = site.resolve()
    checked = 0
    for path, page in html.items():
        for link in page.links:
            if link.startswith(("http:", "https:", "mailto:", "data:")):
                continue
            target, frag = urldefrag(link)
            dest = (path.parent / target).resolve() if target else path
            assert dest.is_relative_to(root) and dest.is_file(), \
                f"{path.relative_to(root)}: {link} is not a file of the site"
            if frag:
                assert dest.suffix == ".html" and frag in html[dest].ids, \
                    f"{path.relative_to(root)}: no element #{frag} in {link}"
            checked += 1
    assert checked > 100


def spec_links(site: Path, version: str):
    """(spec module, qualname, source page, line) of each spec a version page lists."""
    text = (site / "versions" / f"{version}.html").read_text()
    for section in text.split('<section id="part-')[1:]:
        for qualname, href, line in re.findall(
                r'<li id="([\w.]+)">.*?<a href="([^"#]+)#L(\d+)"', section):
            yield Path(href).name.removesuffix(".html"), qualname, href, int(line)


def test_a_spec_link_opens_the_spec_at_its_def_line(site):
    for version in VERSIONS:
        for module, qualname, href, line in spec_links(site, version):
            source = (site / "versions" / href).read_text()
            found = re.search(rf'<tr id="L{line}">.*?<pre>(.*?)</pre>', source)
            assert found, f"{version}: {href} has no element #L{line}"
            row = found.group(1)
            name = qualname.split(".")[-1]
            assert re.match(rf"\s*(async )?def {name}\(", unescape(row)), \
                f"{version}: {module} line {line} is {row!r}, not the def of {name}"


def test_no_fixture_or_helper_appears_as_a_spec(site):
    """What a page lists as specs is what pytest collects: plain functions named test*. A fixture
    (`tested_once`) is neither, whatever its name starts with."""
    listed = 0
    for version in VERSIONS:
        for module, qualname, _, _ in spec_links(site, version):
            obj = functools.reduce(getattr, qualname.split("."),
                                   importlib.import_module(f"spec.{Path(module).stem}"))
            assert inspect.isfunction(obj), \
                f"{version}: {module}::{qualname} is a {type(obj).__name__}, not a spec"
            listed += 1
    assert listed > 200


def test_every_version_page_and_compare_view_is_reachable_from_the_index(site, html):
    seen, todo = set(), [(site / "index.html").resolve()]
    while todo:
        path = todo.pop()
        if path in seen or path.suffix != ".html" or not path.is_relative_to(site.resolve()):
            continue
        seen.add(path)
        todo += [(path.parent / urldefrag(link)[0]).resolve() for link in html[path].links
                 if urldefrag(link)[0]]
    assert seen == set(html)


def test_every_compare_page_lists_the_files_the_version_owns(site, html):
    for page in version_pages()[1:]:
        found = sorted((site / "compare").glob(f"*--{page.name}.html"))
        assert found, f"no compare page ends at {page.name}"
        for path in found:
            text = "".join(html[path.resolve()].text)
            for rel in page.owned:
                assert rel in text, f"{path.name} does not list {rel}"


def test_the_file_the_page_contract_names_opens_the_compare(site):
    html = (site / "compare" / f"{VERSIONS[1]}--{VERSIONS[2]}.html").read_text()
    side = html[html.index('id="side-by-side"'):]
    assert side.index("model.py (changed)") < side.index("__init__.py (changed)")


def test_a_page_without_a_section_fails_the_build_naming_version_and_section(tmp_path):
    spec_dir = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, spec_dir, ignore=shutil.ignore_patterns("__pycache__", "mutants",
                                                                      "__snapshots__", "support"))
    module = spec_dir / "test_v02_kv_cache.py"
    module.write_text(module.read_text().replace("Core principle:", "Core idea:", 1))
    with pytest.raises(MissingSectionError, match=r"^v02_kv_cache: .*'Core principle'"):
        docs.build(tmp_path / "out", spec_dir=spec_dir)


def test_two_builds_are_byte_identical(site, results):
    again = site.parent / "b"
    docs.build(again, results=results)
    first = {p.relative_to(site): p.read_bytes() for p in sorted(site.rglob("*")) if p.is_file()}
    second = {p.relative_to(again): p.read_bytes() for p in sorted(again.rglob("*")) if p.is_file()}
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []


def test_a_junit_file_shows_pass_fail_and_skip_per_spec_and_per_version(site):
    html = (site / "versions" / "v02_kv_cache.html").read_text()
    assert '[passed]</span> <a href="' in html.split("Decode ignores the history")[0][-200:]
    assert "[failed]" in html.split("Decode reads the cache")[0][-200:]
    assert "[skipped]" in html.split("The cache holds the keys")[0][-200:]
    skipped = html.split("The cache holds the keys")[1].split("</li>")[0]
    assert '<span class="reason"> (no oracle)</span>' in skipped, "the skip reason is not shown"
    index = (site / "index.html").read_text()
    row = index[index.index('href="versions/v02_kv_cache.html"'):].split("</tr>")[0]
    assert "1 passed, 1 failed, 1 skipped" in row
    other = index[index.index('href="versions/v03_request_states.html"'):].split("</tr>")[0]
    assert "not run" in other


def test_the_cli_builds_the_site_and_refuses_a_missing_results_file_in_one_line(built, tmp_path,
                                                                                capsys):
    from torchlet import cli

    site, code = built
    assert code == 0
    assert (site / "index.html").is_file()
    capsys.readouterr()
    code = cli.main(["docs", "build", "--out", str(tmp_path / "other"),
                     "--results", str(tmp_path / "missing.xml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and err[0].startswith("torchlet: error"), err
    assert "missing.xml" in err[0]


RECIPE_ROW = re.compile(r'<tr( class="swapped")?><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td>'
                        r'<td>(.*?)</td></tr>')


def recipe_table(page: Path) -> list[tuple]:
    """(part, label, writer, file, highlighted, writer's href, file's href) of each row of a
    version page's parts table; [] for a page without one."""
    text = page.read_text()
    if '<table class="recipe">' not in text:
        return []
    table = text[text.index('<table class="recipe">'):].split("</table>")[0]

    def plain(cell):
        return unescape(re.sub(r"<[^>]+>", "", cell))

    def href(cell):
        m = re.search(r'href="([^"]+)"', cell)
        return m.group(1) if m else None

    return [(plain(part), plain(label), plain(writer), plain(file), bool(mark), href(writer),
             href(file)) for mark, part, label, writer, file in RECIPE_ROW.findall(table)]


def test_a_version_page_shows_its_recipe_with_writers_and_files_its_own_parts_highlighted(
        tmp_path):
    tree = write_recipe_tree(tmp_path / "tree")
    (tmp_path / "spec").mkdir()
    out = tmp_path / "out"
    docs.build(out, spec_dir=tmp_path / "spec", root=tree)
    for version, rows in ROWS.items():
        page = out / "versions" / f"{version}.html"
        table = recipe_table(page)
        assert [row[:5] for row in table] == rows, version
        for _, _, writer, _, _, writer_href, file_href in table:
            assert writer_href == f"{writer}.html"
            assert (page.parent / file_href).resolve().is_file(), file_href
    assert recipe_table(out / "versions" / "v02_bare.html") == []
    assert 'id="parts"' not in (out / "versions" / "v02_bare.html").read_text()


def test_the_reference_v14_page_lists_every_part_of_its_recipe_with_its_writer(site):
    version = implementations.load("v14")
    if version.recipe is None:
        pytest.skip("v14 declares no PARTS yet")
    page = site / "versions" / f"{version.name}.html"
    expected = [(r.name, r.label, r.writer, r.file, r.swapped) for r in recipe_rows(version)]
    table = recipe_table(page)
    assert [row[:5] for row in table] == expected
    assert {row[0] for row in table if row[4]} == set(version.recipe.swapped())
    for _, _, writer, _, _, writer_href, file_href in table:
        assert writer in VERSIONS and writer_href == f"{writer}.html"
        assert file_href is not None and (page.parent / file_href).resolve().is_file()


def test_every_version_from_v03_on_shows_pictures_of_its_run_inline_and_as_svg_files(site):
    start = next(i for i, n in enumerate(VERSIONS) if n.startswith("v03"))
    for name in VERSIONS:
        html = (site / "versions" / f"{name}.html").read_text()
        figures = re.findall(r'<figure id="picture-(\w+)"><svg .*?</svg>', html)
        if VERSIONS.index(name) < start:
            assert not figures, name
            continue
        assert figures, f"{name}'s page has no picture"
        for view in figures:
            drawn = (site / "pictures" / f"{name}-{view}.svg").read_text()
            assert drawn.startswith("<svg ") and drawn.strip().endswith("</svg>")
            # every box names what it stands for: a step of the run, or (v16's shards) a rank
            assert re.search(r'data-(step|rank)="', drawn), f"{name} {view}: no box of the run"


def test_the_index_links_the_reader_documents_and_says_where_its_cpu_figures_come_from(site):
    index = Page((site / "index.html").read_text())
    for doc in ("learners", "benchmarks", "mutants"):
        assert f"docs/{doc}.html" in index.links
        assert (site / "docs" / f"{doc}.html").is_file()
    bench = Page((site / "docs" / "benchmarks.html").read_text())
    charts = [link for link in bench.links if link.endswith(".png")]
    assert charts and all((site / "docs" / c).is_file() for c in charts)
    text = "".join(index.text)
    assert "CPU tok/s: output tokens per second of torchlet bench cpu" in text
    assert "not SmolLM2" in text


def test_a_site_built_without_results_says_in_one_line_how_to_get_them_and_marks_no_spec():
    """A fresh clone has no build/junit.xml: "[not run]" on every spec and "not run" in every
    row read as untested, so the index says once, above the map, how to fill them in."""
    pages = version_pages()
    none = load_results(None)
    index = index_html(pages, none, {}, [])
    hint = Page(index[index.index("</h1>"):index.index("<table")])
    assert any("pytest -n 2 --junitxml=build/junit.xml" in t for t in hint.text), hint.text
    assert "last run" not in index and "not run" not in index
    for i, page in enumerate(pages[:3]):
        text = version_html(page, None, None, none)
        assert "not run" not in text and "notrun" not in text, page.name


def test_every_document_in_docs_is_a_page_linked_from_the_index_and_keeps_its_links(site):
    """Each reader document (docs/*.md) is a page the index links; a link in one to another
    document or to an image in docs/ stays a link (the link check above resolves it)."""
    index = Page((site / "index.html").read_text())
    documents = sorted(DOCS_DIR.glob("*.md"))
    assert len(documents) >= 9
    for md in documents:
        assert f"docs/{md.stem}.html" in index.links, f"the index does not link {md.name}"
        page = Page((site / "docs" / f"{md.stem}.html").read_text())
        for target in re.findall(r"\]\(([^)\s#]+)\)", md.read_text()):
            if (md.parent / target).is_file():
                assert target.replace(".md", ".html") in page.links, f"{md.name}: {target}"


def test_a_reader_documents_code_tables_and_lists_render_as_code_tables_and_lists():
    """The documents that became pages write code indented four spaces and fenced inside a
    list item, and tables whose rule has no spaces (|---|---|): each renders as code or as a
    table (not as a paragraph or a row of dashes), and a list's items as one list."""
    text = ("- Command:\n\n  ```\n  pytest -q\n  ```\n\nThen:\n\n    ./setup.sh && pytest\n"
            "    pytest -k v02\n\nruns it.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- one\n- two\n")
    html = markdown.render(text, lambda target: target)
    assert "<pre>pytest -q</pre>" in html
    assert "<pre>./setup.sh &amp;&amp; pytest\npytest -k v02</pre>" in html
    assert "<table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>" in html
    assert "<ul><li>one</li><li>two</li></ul>" in html


def files_paragraphs(text: str) -> list[str]:
    """The HTML of each "Files" section on a version page: from its heading to the next."""
    return [part.split("<h3")[0] for part in text.split('<h3 class="section">Files</h3>')[1:]]


def test_every_file_a_version_page_names_links_to_its_source(site):
    """The paragraphs that name a version's files (implementations/v08_paged_gqa_py/kv.py,
    implementations/v05_decode_lanes/{kv.py, runner.py}, torchlet/contract/values.py, a bare
    runner.py meaning the version's own) link each name of a file of the repository to the page
    of its source; transformers' modeling_qwen2.py, not one, stays text."""
    linked = 0
    for version in VERSIONS:
        own = effective_modules(version)
        for paragraph in files_paragraphs((site / "versions" / f"{version}.html").read_text()):
            for href, name in re.findall(r'<a href="([^"]+)">([^<]+)</a>', paragraph):
                assert href.endswith(f"/{Path(name).name}.html"), f"{version}: {name} -> {href}"
                linked += 1
            plain = re.sub(r"<a [^>]+>[^<]+</a>", "", paragraph)
            for name in re.findall(r"[\w./]+\.py\b", plain):
                assert not ((REPO / name).is_file() or name in own
                            or (SPEC_DIR / name).is_file()), f"{version}: {name} is not a link"
    assert linked > 100


# --- the parts page ----------------------------------------------------------------------------

def test_the_index_links_the_parts_page_before_any_version_page(site):
    links = Page((site / "index.html").read_text()).links
    versions = [i for i, link in enumerate(links) if link.startswith("versions/")]
    assert "docs/parts.html" in links and versions
    assert links.index("docs/parts.html") < versions[0]


def test_the_parts_page_lists_every_part_with_its_protocols_in_order(site):
    """A section per part of PART_NAMES, in order, and inside it a heading for each Protocol
    PROTOCOLS names for the part (the ids the version pages link to)."""
    text = (site / "docs" / "parts.html").read_text()
    at = [text.index(f'<h2 id="{part}">') for part in PART_NAMES]
    assert at == sorted(at)
    ends = at[1:] + [text.index('<h2 id="one-token-through-a-v16-decode-step">')]
    for part, start, end in zip(PART_NAMES, at, ends):
        for _, protocol in PROTOCOLS[part]:
            found = text.find(f'<h3 id="{protocol.__name__.lower()}">', start)
            assert start < found < end, f"{part}: no {protocol.__name__} in its section"


def test_a_version_pages_parts_link_to_the_protocol_each_satisfies_there(site):
    for version in ("v00_full_recompute", "v08_paged_gqa_py", "v16_tensor_parallel"):
        text = (site / "versions" / f"{version}.html").read_text()
        table = text[text.index('<table class="recipe">'):].split("</table>")[0]
        links = dict((part, href) for href, part in re.findall(
            r'<tr[^>]*><td><a href="([^"]+)"><code>(\w+)</code></a></td>', table))
        assert list(links) == list(implementations.load(version).recipe.parts), version
        for part, href in links.items():
            protocol = protocol_of(part, version)
            anchor = protocol.__name__.lower() if protocol else part
            assert href == f"../docs/parts.html#{anchor}", (version, part, href)


def test_docs_parts_md_is_what_torchlet_docs_parts_doc_writes():
    """Its part sections (Protocols, members, promises, callers, writers) and its walk are
    generated from parts.py, the recipes, implementations/ and a run: a change to any of them
    that the page does not follow fails here (`PYTHONPATH=. python -m torchlet.docs.parts_doc`
    rewrites it)."""
    text = parts_doc.PARTS_MD.read_text()
    made = parts_doc.blocks()
    assert {m.group("name") for m in parts_doc.BLOCK.finditer(text)} == set(made)
    assert parts_doc.update(text, made) == text, (
        "docs/parts.md is out of step: run `PYTHONPATH=. python -m torchlet.docs.parts_doc`")


def test_the_walk_follows_one_decode_token_through_every_part_of_v16():
    """The part-level calls of a steady v16 decode step pass, in this order, through the
    scheduler, the policy, the K/V memory, the inputs, the runner, the model, the sampler, the
    request and the scheduler again, each through a member of the part's Protocol at v16."""
    from torchlet.docs.walk import walk

    calls = walk("v16")
    for call in calls:
        assert call.protocol == protocol_of(call.part, "v16").__name__
    order = ["loop.step", "scheduler.schedule", "policy.budget", "runner.step_lanes",
             "inputs.write", "kv.grow", "kv.block_table", "kv.slot", "model.forward_decode",
             "sampler.draw_lanes", "scheduler.postprocess", "request.append"]
    named = [f"{c.part}.{c.member}" for c in calls]
    at = [named.index(name) for name in order]
    assert at == sorted(at), named
    assert calls[0].depth == 0 and all(c.depth > 0 for c in calls[1:])
