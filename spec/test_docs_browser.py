"""The documentation site in a real browser.

What it introduces: headless Chromium, driven over the Chrome DevTools protocol
(spec/support/serve/cdp.py), clicking through the site the way a reader does: the version map, a
version page, its compare view, and the switch between the side-by-side and unified views; and
a spec link, served and opened as files, landing on the spec's line; the pictures, and a
compare page's method view with its two methods side by side.
Why the previous version needs it: spec/test_docs_site.py checks the HTML as text; only a browser
shows that the pages load without console errors, that links are followed from a server and that
the script's toggle really hides one view and shows the other, and where a #L anchor scrolls to.
Core principle: observe what a reader sees: navigation by clicks, visibility by computed style,
errors from the browser's own console, screenshots as evidence.
Files: spec/support/serve/cdp.py, torchlet/docs/site.py (the toggle script, the source pages),
torchlet/docs/draw.py (the pictures, whose screenshots must not be blank).
Tradeoff left visible: it needs /usr/bin/chromium, so it is a separate step of .ci/run
(`pytest -m browser spec/test_docs_browser.py`) and skips elsewhere; it checks one pair of
versions, not every page.
"""
from __future__ import annotations

import functools
import os
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import implementations
from torchlet import docs

CHROMIUM = "/usr/bin/chromium"
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                 reason=f"no browser: {CHROMIUM} is missing "
                                        "(apt-get install -y chromium)")]


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the spec's output, not the server's
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    docs.build(out)
    return out


@pytest.fixture(scope="module")
def served(site):
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=site))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join()


@pytest.fixture
def browser(tmp_path):
    from spec.support.serve.cdp import Browser

    b = Browser(CHROMIUM, tmp_path / "profile")
    yield b
    b.close()


def visible(browser, selector: str) -> bool:
    return browser.js(f"(function(e){{return !!e && e.offsetParent !== null && "
                      f"getComputedStyle(e).display !== 'none'}})"
                      f"(document.querySelector({selector!r}))")


def test_a_reader_clicks_from_the_map_to_a_version_to_its_compare_and_switches_views(
        served, browser, tmp_path):
    old, new = implementations.version_names()[1:3]
    browser.goto(f"{served}/index.html")
    assert "version map" in browser.js("document.title + document.body.innerText")
    browser.click_and_load(f'a[href="versions/{new}.html"]')
    assert browser.js("location.pathname") == f"/versions/{new}.html"
    assert browser.js("document.querySelectorAll('h3.section').length") >= 5
    browser.screenshot(tmp_path / "site-version.png")

    browser.click_and_load(f'a[href="../compare/{old}--{new}.html"]')
    assert browser.js("location.pathname") == f"/compare/{old}--{new}.html"
    assert visible(browser, "#side-by-side") and not visible(browser, "#unified")
    assert visible(browser, "#f-model-py"), "the changed file is not shown side by side"
    assert "model.py (changed)" in browser.js("document.querySelector('#side-by-side').innerText")
    browser.screenshot(tmp_path / "site-compare.png")

    browser.js("document.getElementById('toggle').click()")
    assert visible(browser, "#unified") and not visible(browser, "#side-by-side")
    assert visible(browser, "#f-model-py-unified"), "the changed file is not shown unified"
    browser.js("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'n'}))")
    assert browser.js("document.querySelectorAll('#unified tr.current').length") == 1
    browser.screenshot(tmp_path / "site-compare-unified.png")

    assert browser.errors == []
    for name in ("site-version.png", "site-compare.png", "site-compare-unified.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("TORCHLET_SCREENSHOTS")  # a directory to keep them in (docs/)
    if keep:
        for name in ("site-version.png", "site-compare.png"):
            shutil.copy(tmp_path / name, Path(keep) / name)


def test_a_spec_link_opens_its_source_at_the_spec_line_highlighted_served_and_from_files(
        site, served, browser):
    version = next(n for n in implementations.version_names() if n.startswith("v08"))
    for base in (served, site.as_uri()):
        browser.goto(f"{base}/versions/{version}.html")
        spec = browser.js("document.querySelector('#part-0 li').id")
        browser.click_and_load("#part-0 li a")
        assert browser.js("location.pathname").endswith(".py.html"), browser.js("location.href")
        line = browser.js("location.hash").removeprefix("#")
        row = f"document.getElementById({line!r})"
        assert browser.js(f"{row}.cells[1].innerText").startswith(f"def {spec.split('.')[-1]}(")
        assert abs(browser.js(f"{row}.getBoundingClientRect().top")) < 1, "not scrolled to the line"
        shade = "getComputedStyle({}.cells[1]).backgroundColor"
        assert browser.js(shade.format(row)) != browser.js(shade.format(f"{row}.nextSibling")), \
            "the line is not highlighted"
    assert browser.errors == []


PICTURES = (("v08", "pool"), ("v05", "lanes"), ("v12", "pool"), ("v09", "kernels"),
            ("v13", "kernels"))


def painted(png: Path) -> tuple[float, int]:
    """(share of pixels that are not white, distinct colours) of a screenshot."""
    from PIL import Image

    pixels = list(Image.open(png).convert("RGB").getdata())
    return sum(p != (255, 255, 255) for p in pixels) / len(pixels), len(set(pixels))


def test_a_version_pages_pictures_render_and_a_compare_page_marks_what_changed_in_a_line(
        served, browser, tmp_path):
    names = implementations.version_names()
    shots = []
    for short, view in PICTURES:
        name = next(n for n in names if n.startswith(short + "_"))
        browser.goto(f"{served}/versions/{name}.html")
        rect = browser.js(f"(function(r){{return {{x: r.left + scrollX, y: r.top + scrollY, "
                          f"width: r.width, height: r.height}}}})(document.querySelector("
                          f"'#picture-{view} svg').getBoundingClientRect())")
        assert rect["width"] > 300 and rect["height"] > 80, (name, view, rect)
        shot = tmp_path / f"picture-{short}-{view}.png"
        browser.screenshot(shot, clip=rect)
        share, colours = painted(shot)
        assert share > 0.05 and colours >= 4, f"{name}'s {view} picture looks blank: {share:.3f}"
        shots.append(shot)
    old, new = names[5:7]
    browser.goto(f"{served}/compare/{old}--{new}.html")
    assert browser.js("document.querySelectorAll('#side-by-side td.ins mark').length") > 0
    assert browser.js("getComputedStyle(document.querySelector('#side-by-side td.ins mark'))"
                      ".backgroundColor") != browser.js(
        "getComputedStyle(document.querySelector('#side-by-side td.ins')).backgroundColor")
    assert browser.errors == []
    keep = os.environ.get("TORCHLET_SCREENSHOTS")
    if keep:
        for shot in shots:
            shutil.copy(shot, Path(keep) / shot.name)


def test_a_compare_pages_method_view_shows_the_two_methods_side_by_side(served, browser,
                                                                         tmp_path):
    old, new = (next(n for n in implementations.version_names() if n.startswith(v + "_"))
                for v in ("v05", "v06"))
    browser.goto(f"{served}/compare/{old}--{new}.html")
    method = "document.querySelector('#methods div.method[data-new$=\"StaticInputs.write\"]')"
    assert browser.js(f"{method}.dataset.old").endswith("LaneInputs.write")
    cells = browser.js(f"Array.from({method}.querySelector('tr').cells).map(function(c){{"
                       "var r = c.getBoundingClientRect(); return [r.left, r.top, r.width];})")
    (_, top, _), (left_x, left_top, left_w), _, (right_x, right_top, right_w) = cells
    assert left_top == right_top == top and left_x + left_w <= right_x, "not side by side"
    assert left_w > 100 and right_w > 100, cells
    browser.js(f"{method}.scrollIntoView(); window.scrollBy(0, -60)")  # its heading too
    shot = tmp_path / "site-compare-methods.png"
    browser.screenshot(shot)
    share, colours = painted(shot)
    assert share > 0.05 and colours >= 4, f"the method view looks blank: {share:.3f}"
    assert browser.errors == []
    keep = os.environ.get("TORCHLET_SCREENSHOTS")
    if keep:
        shutil.copy(shot, Path(keep) / shot.name)
