"""Writing the site: index (the version map), one page per version, one compare page per pair.

Every link is relative and stays inside the site, every order is sorted, and nothing depends on
the clock, so the site opens from file:// and from `python -m http.server -d DIR` alike, and two
builds of one tree are byte-identical. The sources a page links to are pages of the site too
(source/...py.html), each line with an id, because a link to the .py file in the tree is outside
a served site (404) and a #L anchor into a plain text file jumps nowhere: the versions' files, the
spec modules, and the harness files a page contract's Files paragraph names (Sources).
Without a results file (a fresh clone) no spec is marked; the index says how to get results."""
from __future__ import annotations

import json
import re
import shutil
from html import escape
from pathlib import Path

from torchlet import methods
from torchlet.contract import protocol_of
from torchlet.docs import compare
from torchlet.docs.pages import SECTIONS, VersionPage
from torchlet.learner import DEFAULT_RESULTS, REPO, read_junit

PARTS_PAGE = "docs/parts.html"  # docs/parts.md: each part's Protocols, which the recipes link

CSS = """html{overflow-y:scroll}body{font:15px/1.5 system-ui,sans-serif;margin:2em auto;max-width:78em;padding:0 1em;color:#222}
table{border-collapse:collapse}th,td{border:1px solid #ddd;padding:.2em .5em;vertical-align:top}
nav a{margin-right:1em}.passed{color:#17702a}.failed{color:#b00020}.skipped,.notrun{color:#777}
table.sbs,table.uni{width:100%;font:12px/1.35 ui-monospace,monospace}
table.sbs td,table.uni td{border:0;padding:0 .4em}pre{margin:0;white-space:pre-wrap}
td.n{color:#999;text-align:right;width:3em;user-select:none}td.del{background:#fde8e8}
td.ins{background:#e3f6e5}td.empty{background:#f4f4f4}tr.fold td{background:#eef;color:#556;text-align:center}
tr.change{outline:2px solid transparent}tr.current{outline-color:#f90}
body.js-sbs .view-uni,body.js-uni .view-sbs{display:none}.toggle{display:none}body.js .toggle{display:inline}
table.src{width:100%;font:12px/1.35 ui-monospace,monospace}table.src td{border:0;padding:0 .4em}
table.src td.n a{color:inherit;text-decoration:none}table.src tr:target td{background:#fff3b0}
table.recipe tr.swapped td{background:#fff3d6;font-weight:600}
mark{background:#f9c0c0;color:inherit}td.ins mark{background:#a6e3ad}
details>summary{cursor:pointer;color:#336}div.method h4{margin:.8em 0 .2em;font-weight:500}div.method table.sbs{table-layout:fixed}
div.method td.n{width:3em}.reason{color:#777;font-size:13px}img{max-width:100%}figure{margin:1em 0;overflow-x:auto}figcaption{color:#555;font-size:13px;max-width:60em}
"""

# Without JavaScript both views are on the page; the script shows one at a time and adds
# n / p to step through the changes of the view on show.
JS = """(function(){var b=document.body;b.classList.add('js','js-sbs');
var t=document.getElementById('toggle');var cur=-1;
function view(){return b.classList.contains('js-sbs')?'view-sbs':'view-uni';}
t.addEventListener('click',function(){var s=b.classList.contains('js-sbs');
b.classList.toggle('js-sbs',!s);b.classList.toggle('js-uni',s);
t.textContent=s?'Show side by side':'Show unified';cur=-1;});
function go(d){var c=document.querySelectorAll('.'+view()+' tr.change');if(!c.length)return;
if(cur>=0&&c[cur])c[cur].classList.remove('current');cur=Math.max(0,Math.min(c.length-1,cur+d));
c[cur].classList.add('current');var d=c[cur].closest('details');if(d)d.open=true;c[cur].scrollIntoView({block:'center'});}
document.addEventListener('keydown',function(e){if(e.key==='n')go(1);if(e.key==='p')go(-1);});})();
"""


def page(title: str, body: str, depth: int, script: bool = False) -> str:
    up = "../" * depth
    js = f'<script src="{up}site.js"></script>' if script else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>{escape(title)}'
            f'</title><link rel="stylesheet" href="{up}style.css"></head><body>\n{body}\n{js}'
            f'</body></html>\n')


def prose(text: str, link=None) -> str:
    """Paragraphs with `code`; link: a FILE_NAME substitution (Sources.linker) for a paragraph
    that names files."""
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    code = re.compile(r"`([^`]+)`")
    out = []
    for p in paras:
        p = escape(p, quote=False)
        out.append("<p>" + code.sub(r"<code>\1</code>", FILE_NAME.sub(link, p) if link else p)
                   + "</p>")
    return "".join(out)


def compare_name(a: str, b: str) -> str:
    return f"{a}--{b}.html"


def source_path(*parts: str) -> str:
    """Where a source file's page lies in the site: source/spec/test_x.py.html,
    source/implementations/VERSION/loop.py.html."""
    return "/".join(("source", *parts)) + ".html"


def source_html(path: str, label: str, text: str, version: str | None) -> str:
    """One source file as rows with ids L1, L2, ... (each number links to its own line), so that
    `path#L42` opens at line 42, which the CSS :target rule highlights. version: the page its
    nav leads back to; None for a file of the harness (torchlet/contract/values.py)."""
    rows = "".join(f'<tr id="L{n}"><td class="n"><a href="#L{n}">{n}</a></td>'
                   f'<td><pre>{escape(line, quote=False)}</pre></td></tr>'
                   for n, line in enumerate(text.splitlines(), 1))
    depth = path.count("/")
    up = "../" * depth
    back = f'<a href="{up}versions/{version}.html">{version}</a>' if version else ""
    nav = f'<nav><a href="{up}index.html">version map</a>{back}</nav>'
    return page(label, f'{nav}<h1>{escape(label)}</h1><table class="src">{rows}</table>', depth)


def file_link(version: str, rel: str, text: str) -> str:
    """A link from a page one level down (versions/, compare/) to a version's module file."""
    return f'<a href="../{source_path("implementations", version, rel)}">{escape(text)}</a>'


# A file a page contract's Files paragraph names: a path (implementations/v08_paged_gqa_py/kv.py,
# torchlet/contract/values.py), a brace group (implementations/v05_decode_lanes/{kv.py, runner.py}) or
# a bare name (runner.py: the version's own).
FILE_NAME = re.compile(r"((?:[\w.-]+/)*)(\{[^{}]*\}|[\w-][\w.-]*\.py\b)")


class Sources:
    """The source pages the Files paragraphs link to. Pages of the site, not links into the
    repository's tree: the site is served on its own (python -m http.server -d docs/_site),
    where a path out of it 404s, and a .py opened as a file has no line to jump to. The
    versions' files and the spec modules have pages already; the other files of the
    repository a paragraph names (torchlet/contract/values.py, spec/support/oracles/oracle.py) get theirs
    from `extra` (site path -> file)."""

    def __init__(self, owned: dict[str, list[str]], repo: Path = REPO):
        self.owned, self.repo, self.extra = owned, Path(repo).resolve(), {}

    def find(self, path: str, p: VersionPage) -> str | None:
        """The site path of the page showing `path` as version p's page names it; None for a
        file the repository does not hold (transformers' modeling_qwen2.py)."""
        head, _, rest = path.partition("/")
        if head == "implementations":
            version, _, rel = rest.partition("/")
            return (source_path("implementations", version, rel)
                    if rel in self.owned.get(version, ()) else None)
        if not rest:  # a bare name: the version's own module, else a spec module
            owner = p.name if path in p.owned else p.inherited.get(path)
            if owner:
                return source_path("implementations", owner, path)
            path = f"spec/{path}"
        file = (self.repo / path).resolve()
        if not (file.is_relative_to(self.repo) and file.is_file()):
            return None
        self.extra[source_path(*Path(path).parts)] = file
        return source_path(*Path(path).parts)

    def linker(self, p: VersionPage):
        """A FILE_NAME substitution linking each name (from versions/) to its page; a bare name
        not found is looked for in the directory named last (spec/support/oracles/oracle.py and
        prompts.py)."""
        last = ""

        def one(path: str, text: str) -> str:
            nonlocal last
            found = self.find(path, p)
            if found is None and "/" not in path and last:
                found = self.find(last + path, p)
            if "/" in path:
                last = path.rsplit("/", 1)[0] + "/"
            return f'<a href="../{found}">{text}</a>' if found else text

        def sub(m: re.Match) -> str:
            prefix, name = m.groups()
            if not name.startswith("{"):
                return one(prefix + name, prefix + name)
            names = [n.strip() for n in name[1:-1].split(",")]
            return prefix + "{" + ", ".join(one(prefix + n, n) for n in names) + "}"
        return sub


# ---------------------------------------------------------------- spec results and benchmarks

def load_results(path: Path | None) -> dict[tuple[str, str], list[tuple[str, str, str]]] | None:
    """(spec file name, qualname) -> [(parametrization id, status, message)] from a pytest
    JUnit XML; the message is a skip's reason or a failure's first line. None without a file:
    the pages then mark no spec, where an empty dict marks each "not run"."""
    if path is None:
        return None
    found: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for outcome in read_junit(path):
        file, _, rest = outcome.test.partition("::")
        name, _, params = rest.partition("[")
        key = (Path(file).name, name.replace("::", "."))
        found.setdefault(key, []).append((params.rstrip("]"), outcome.status, outcome.message))
    return found


def _mine(runs, version: str) -> list:
    """A spec's runs parametrized with the version where there are such runs, else all."""
    return [r for r in runs if version in re.split(r"[-\[\]]", r[0])] or list(runs)


def spec_status(runs: list[tuple[str, str, str]] | None, version: str) -> str:
    """The status of a spec for a version: its runs for the version (_mine); failed beats
    passed beats skipped."""
    if not runs:
        return "not run"
    mine = [r[1] for r in _mine(runs, version)]
    for status in ("failed", "passed", "skipped"):
        if status in mine:
            return status
    return "not run"


def skip_reasons(runs, version: str) -> list[str]:
    """The distinct reasons the version's runs of a spec were skipped, in order."""
    found = []
    for _, status, message in _mine(runs or [], version):
        reason = message.removeprefix("Skipped: ").strip()
        if status == "skipped" and reason and reason not in found:
            found.append(reason)
    return found


def load_benchmarks(bench_dir: Path) -> dict[str, dict[str, str]]:
    """version -> {column: figure} from docs/benchmarks/*.json: CPU output tok/s, and on the
    GPU workload the wall time and % of the floor."""
    figures: dict[str, dict[str, str]] = {}
    for path in sorted(Path(bench_dir).glob("*.json")):
        data = json.loads(path.read_text())
        for row in data.get("rows", []):
            cell = figures.setdefault(row.get("version", ""), {})
            if data.get("kind") == "cpu" and "output_tok_s" in row:
                cell["cpu"] = f"{row['output_tok_s']:.0f}"
            if data.get("kind") == "gpu-workload" and "wall_s" in row:
                cell["gpu_s"] = f"{row['wall_s']:.1f} s"
                if row.get("pct_floor") is not None:
                    cell["floor"] = f"{row['pct_floor']:.1f}%"
    return figures


# ---------------------------------------------------------------- pages

# A fresh clone has no results: "not run" on every spec would read as untested, so the index
# says this once instead (the README's test command, which leaves the file the build reads).
NO_RESULTS = (f"No spec results yet: run <code>pytest -n 2 --junitxml="
              f"{DEFAULT_RESULTS.relative_to(REPO)}</code>, then <code>torchlet docs build</code>.")

READING = (("parts.md", "The parts", "what each part of an engine promises (its Protocol), which "
             "versions write it, and one token through a v16 decode step, part by part"),
           ("learners.md", "The learner's path", "fill in one version at a time"),
           ("usage.md", "Usage", "generate, chat, serve and this site, with the flags worth "
            "knowing"),
           ("testing.md", "Testing", "the spec suite: its command, how a run picks its specs, "
            "its times"),
           ("layout.md", "Layout", "where each thing lives"),
           ("contract.md", "The engine contract", "what a version declares and what each "
            "capability promises"),
           ("benchmarks.md", "Benchmarks", "every measured figure, with its command and charts"),
           ("perf-notes.md", "Performance notes", "each change's target, what moved, and the "
            "command that measured it"),
           ("gpu.md", "GPU runs", "what ran on a GPU, when, with which command, and what came "
            "out"),
           ("mutants.md", "Mutants", "each deliberate breakage and the spec that notices it"))


def cpu_source(bench_dir: Path) -> str:
    """Where the index's CPU tok/s come from: the model, the workload, the command and when."""
    path = Path(bench_dir) / "cpu.json"
    if not path.is_file():
        return ""
    data = json.loads(path.read_text())
    m, w, env = data.get("model", {}), data.get("workload", {}), data.get("environment", {})
    return (f"CPU tok/s: output tokens per second of <code>{escape(data.get('command', ''))}"
            f"</code> ({escape(data.get('created', '')[:10])}, commit "
            f"{escape(str(env.get('commit', '?')))}, {env.get('cpus', '?')} cores): "
            f"{escape(w.get('describe', ''))}, on a random {escape(str(m.get('family', '')))} "
            f"model (hidden {m.get('hidden_size')}, {m.get('num_layers')} layers, vocab "
            f"{m.get('vocab_size')}), not SmolLM2; see the "
            '<a href="docs/benchmarks.html">benchmarks</a>.')


def index_html(pages: list[VersionPage], results, figures, pairs, cpu_note: str = "",
               reading: tuple = ()) -> str:
    """results None (no JUnit file): no "last run" column, and a line saying how to fill it."""
    rows = []
    for p in pages:
        status = "" if results is None else f"<td>{escape(version_status(p, results))}</td>"
        f = figures.get(p.name, {})
        rows.append(f'<tr><td><a href="versions/{p.name}.html">{p.name}</a></td>'
                    f'<td>{escape(p.idea)}</td><td><code>{escape(p.capability)}</code></td>'
                    f'<td>{len(p.specs)}</td>{status}'
                    + "".join(f"<td>{f.get(k, '—')}</td>" for k in ("cpu", "gpu_s", "floor"))
                    + "</tr>")
    links = "".join(f'<li><a href="compare/{compare_name(a, b)}">{a} → {b}</a></li>'
                    for a, b in pairs)
    body = ("<h1>Torchlet: the version map</h1>"
            + (f"<p>{NO_RESULTS}</p>" if results is None else "")
            + '<p>Start with <a href="docs/parts.html">the parts</a>: an engine is assembled '
            "from parts (model, kv, sampler, inputs, runner, request, policy, scheduler, "
            "loop), each with a Protocol that says what the other parts may ask of it "
            "(torchlet/contract/parts.py); that page lists each Protocol's members, the "
            "versions that write each part, and one token followed through a v16 decode step. "
            "Then read the versions in order; each page is its "
            "spec modules' page contract and the specs that check it. Specs counts the test "
            "functions in a version's own spec modules (not their parametrizations).</p>"
            "<table><tr><th>version</th><th>idea</th><th>capability it adds</th><th>specs</th>"
            + ("" if results is None else "<th>last run</th>")
            + "<th>CPU tok/s</th><th>H200 workload</th><th>% of floor</th></tr>"
            + "".join(rows) + "</table>" + (f"<p>{cpu_note}</p>" if cpu_note else "")
            + ("<h2>Read further</h2><ul>" + "".join(
                f'<li><a href="docs/{name.replace(".md", ".html")}">{title}</a>: {what}</li>'
                for name, title, what in reading) + "</ul>" if reading else "")
            + "<h2>Code compare</h2><ul>" + links + "</ul>")
    return page("Torchlet versions", body, 0)


def version_status(p: VersionPage, results) -> str:
    counts: dict[str, int] = {}
    for part in p.parts:
        for s in part.specs:
            st = spec_status(results.get((part.path.name, s.qualname)), p.name)
            counts[st] = counts.get(st, 0) + 1
    if set(counts) <= {"not run"}:
        return "not run"
    return ", ".join(f"{counts[k]} {k}" for k in ("passed", "failed", "skipped", "not run")
                     if counts.get(k))


def recipe_html(p: VersionPage, owned: dict[str, list[str]]) -> str:
    """The version's parts, from its recipe: part, what it is, the version that wrote it (a link
    to its page) and its file (a link to the file's page when a version of the site owns it);
    the rows of the parts this version swaps highlighted. "" for a version with no recipe."""
    if p.recipe is None:
        return (f"<h2 id=\"parts\">Parts</h2><p>Its recipe could not be read here: "
                f"{escape(p.recipe_error)}</p>" if p.recipe_error else "")
    rows = []
    for r in p.recipe:
        writer = (f'<a href="{r.writer}.html">{escape(r.writer)}</a>' if r.writer in owned
                  else escape(str(r.writer)))
        version, _, rel = r.file.partition("/")
        file = (file_link(version, rel, r.file) if rel in owned.get(version, ())
                else escape(r.file))
        mark = ' class="swapped"' if r.swapped else ""
        protocol = protocol_of(r.name, p.name)
        anchor = protocol.__name__.lower() if protocol is not None else r.name
        rows.append(f'<tr{mark}><td><a href="../{PARTS_PAGE}#{anchor}"><code>'
                    f"{escape(r.name)}</code></a></td>"
                    f"<td><code>{escape(r.label)}</code></td><td>{writer}</td><td>{file}</td></tr>")
    return ('<h2 id="parts">Parts</h2><p>The engine is assembled from these parts, in this order '
            "(its recipe, PARTS). The highlighted ones this version swaps; the others it takes "
            "from the version that wrote them. Each part's name links to the Protocol it "
            f'satisfies at this version, on <a href="../{PARTS_PAGE}">the parts page</a>.</p>'
            '<table class="recipe"><tr><th>part</th><th>what it is</th><th>written by</th>'
            "<th>file</th></tr>" + "".join(rows) + "</table>")


def pictures_html(pictures, why: str) -> str:
    """The version's pictures, inline (each box's tooltip names what it stands for), each with
    a link to its own SVG file; or why it has none."""
    if why:
        return f'<h2 id="pictures">Pictures</h2><p>Not drawn here: {escape(why)}</p>'
    if not pictures:
        return ""
    figures = "".join(f'<figure id="picture-{p.view}">{p.svg}<figcaption>{escape(p.view)}: '
                      f'{escape(p.caption)} (<a href="../{p.file}">SVG</a>)</figcaption></figure>'
                      for p in pictures)
    return ('<h2 id="pictures">Pictures</h2><p>Drawn by <code>torchlet docs build</code> from '
            "a run of this version: its scenario (torchlet/docs/scenarios.py) on the tiny Qwen2 "
            "fixture on the CPU, recorded through the engine contract after every step"
            + (" (one step also watched below torch's dispatcher, op by op)"
               if any(p.view == "kernels" for p in pictures) else "") + ".</p>"
            + figures)


def version_html(p: VersionPage, prev: str | None, nxt: str | None, results,
                 sources: Sources | None = None, pictures=(), why: str = "") -> str:
    """A version's page; sources (the files each version owns, and where the others a page
    names are shown) is what its recipe table and its Files paragraphs link."""
    sources = sources or Sources({})
    nav = ['<a href="../index.html">version map</a>', f'<a href="../{PARTS_PAGE}">parts</a>']
    if prev:
        nav.append(f'<a href="{prev}.html" rel="prev">← {prev}</a>')
        nav.append(f'<a href="../compare/{compare_name(prev, p.name)}">compare with {prev}</a>')
    if nxt:
        nav.append(f'<a href="{nxt}.html" rel="next">{nxt} →</a>')
    out = [f"<nav>{''.join(nav)}</nav><h1>{p.name}</h1><p>{escape(p.idea)}</p>"
           f"<p>Capability it adds: <code>{escape(p.capability)}</code></p>",
           pictures_html(pictures, why)]
    for i, part in enumerate(p.parts):
        src = "../" + source_path("spec", part.path.name)
        out.append(f'<section id="part-{i}"><h2>{escape(part.title)}</h2>'
                   f'<p>From <a href="{src}">spec/{part.path.name}</a></p>')
        for key, heading in SECTIONS:
            link = sources.linker(p) if key == "files" else None
            out.append(f'<h3 class="section">{heading}</h3>{prose(part.sections[key], link)}')
        out.append("<h3>Specs</h3><ul>")
        for s in part.specs:
            # no results at all (None): no mark, NO_RESULTS on the index says why; a results
            # file that lacks the spec: "[not run]"
            runs = (results or {}).get((part.path.name, s.qualname))
            st = "" if results is None else spec_status(runs, p.name)
            mark = f'<span class="{st.replace(" ", "")}">[{st}]</span> ' if st else ""
            why = "".join(f'<span class="reason"> ({escape(r)})</span>'
                          for r in skip_reasons(runs, p.name)) if st == "skipped" else ""
            out.append(f'<li id="{s.qualname}">{mark}<a href="{src}#L{s.line}">'
                       f'{escape(s.sentence)}</a>{why}{prose(s.doc)}</li>')
        out.append("</ul></section>")
    out.append(recipe_html(p, sources.owned))
    out.append('<h2>Files</h2><p>Owned by this version:</p><ul>'
               + "".join(f"<li>{file_link(p.name, f, f)}</li>" for f in p.owned) + "</ul>")
    if p.inherited:
        out.append("<p>Taken from earlier versions:</p><ul>" + "".join(
            f"<li>{file_link(v, f, f)} (from {v})</li>" for f, v in sorted(p.inherited.items()))
            + "</ul>")
    return page(p.name, "".join(out), 1)


LARGE_ROWS, OPEN_FILES, METHOD_ROWS = 1500, 3, 800


def _method_link(m: methods.Method) -> str:
    version, _, rel = m.file.partition("/")
    if not rel:  # defined outside the tree of versions: its module's name
        return f"<code>{escape(m.qualname)}</code>"
    target = "../" + source_path("implementations", version, rel) + f"#L{m.line}"
    return f'<a href="{target}"><code>{escape(m.qualname)}</code></a>'


def method_title(p: methods.Pairing) -> str:
    """"v06's StaticInputs.write in place of v05's LaneInputs.write", or "..., new"."""
    new = f"{p.new.short}'s {_method_link(p.new)}"
    if p.old is None:
        return f"{new}, new in the part"
    return f"{new} in place of {p.old.short}'s {_method_link(p.old)}"


def methods_html(changes: list[methods.PartChange] | None, why: str = "") -> str:
    """The method view: per part the recipes hold differently, each method the newer part runs
    beside the one it takes the place of (or alone), side by side."""
    if why:
        return (f'<section id="methods"><h2>Methods</h2><p>Not read here: {escape(why)}</p>'
                "</section>")
    if not changes:
        return ""
    # Open unless the parts are most of the program (v00 against the newest: over a thousand
    # rows, where each part's summary is the way in); an adjacent pair has a few hundred.
    rows = sum(max(len(p.new.lines), len(p.old.lines if p.old else ()))
               for c in changes for p in c.pairings)
    state = "" if rows > METHOD_ROWS else " open"
    out = ['<section id="methods"><h2>Methods</h2><p>The parts the two recipes (PARTS) hold '
           "differently, method by method: each method the newer part runs and the older one "
           "does not, beside the one it takes the place of (of the same name, or, where a part "
           "was rewritten, the one whose calls it took over), or alone where it is new. Read "
           "from the parts themselves, not the files; the whole files follow.</p>"]
    for c in changes:
        was = f"{escape(c.old_label)} → " if c.old_label else "new: "
        out.append(f'<details class="part" id="part-{c.part}"{state}><summary><code>'
                   f'{escape(c.part)}</code>: {was}{escape(c.new_label)} '
                   f"({len(c.pairings)} method{'s' if len(c.pairings) != 1 else ''})</summary>")
        for p in c.pairings:
            mid = f"m-{c.part}-{p.new.owner}-{p.new.name}"
            if p.old is None:  # alone: its lines, numbered as in its file
                table = compare.unified([], list(p.new.lines), mid, (1, p.new.line))
            else:
                table = compare.side_by_side(list(p.old.lines), list(p.new.lines), mid,
                                             (p.old.line, p.new.line))
            old = f"{p.old.version}:{p.old.qualname}" if p.old else ""
            out.append(f'<div class="method" id="{escape(mid)}" data-part="{c.part}" '
                       f'data-new="{escape(p.new.version)}:{escape(p.new.qualname)}" '
                       f'data-old="{escape(old)}"><h4>{method_title(p)}</h4>{table}</div>')
        if c.gone:
            out.append("<p>No longer run by the part: " + ", ".join(
                f"{m.short}'s {_method_link(m)}" for m in c.gone) + "</p>")
        out.append("</details>")
    return "".join(out) + "</section>"


def compare_html(a: str, b: str, diffs: list[compare.FileDiff], named: list[str],
                 changes: list[methods.PartChange] | None = None, why: str = "") -> str:
    shown = compare.order_files(diffs, named)
    rows = []
    for d in diffs:
        name = (f'<a href="#{compare.file_id(d.rel)}">{escape(d.rel)}</a>'
                if d in shown else escape(d.rel))
        rows.append(f'<tr class="file {d.status}"><td>{name}</td><td>{d.status}</td>'
                    f'<td>{file_link(d.owner, d.rel, d.owner)}</td></tr>')
    out = [f'<nav><a href="../index.html">version map</a><a href="../versions/{a}.html">{a}</a>'
           f'<a href="../versions/{b}.html">{b}</a></nav>',
           f"<h1>{a} → {b}</h1><p>Each side is the whole module set the version runs with: "
           "the files it owns and those it takes from earlier versions.</p>",
           '<table class="files"><tr><th>file</th><th>status</th><th>from</th></tr>'
           + "".join(rows) + "</table>",
           methods_html(changes, why),
           '<p><button id="toggle" class="toggle" type="button">Show unified</button> '
           'Files: side by side (<a href="#side-by-side">jump</a>) and unified '
           '(<a href="#unified">jump</a>); keys n / p step through changes.</p>']
    sbs, uni = [], []
    rendered = [compare.render_file(d) for d in shown]
    # A large pair (v00 -> the newest is thousands of rows) keeps only its first files open, so
    # the page lays out fast and reads from the top; a summary opens the others.
    large = sum(left.count("<tr") for left, _ in rendered) > LARGE_ROWS
    for i, (d, (left, right)) in enumerate(zip(shown, rendered)):
        head = f"{escape(d.rel)} ({d.status})"
        fid = compare.file_id(d.rel)
        rows_in = left.count("<tr")
        state = "" if large and i >= OPEN_FILES else " open"
        summary = f"<summary>{rows_in} rows</summary>"
        sbs.append(f'<h3 id="{fid}">{head}</h3><details{state}>{summary}{left}</details>')
        uni.append(f'<h3 id="{fid}-unified">{head}</h3><details{state}>{summary}{right}</details>')
    out.append('<section class="view-sbs" id="side-by-side"><h2>Side by side</h2>'
               + "".join(sbs) + "</section>")
    out.append('<section class="view-uni" id="unified"><h2>Unified</h2>'
               + "".join(uni) + "</section>")
    return page(f"{a} → {b}", "".join(out), 1, script=True)


def reading_pages(docs_dir: Path) -> tuple[dict[str, str], dict[str, Path], tuple]:
    """(site path -> html, site path -> file to copy, READING entries present) for the reader
    documents under docs_dir and the images they show."""
    from torchlet.docs import markdown

    present = tuple(r for r in READING if (Path(docs_dir) / r[0]).is_file())
    html, copies = {}, {}

    def keep(target: str) -> str | None:
        path, _, anchor = target.partition("#")
        if not path and anchor:  # a heading of the same page
            return target
        if path in {name for name, _, _ in present}:
            return path.replace(".md", ".html") + (f"#{anchor}" if anchor else "")
        source = Path(docs_dir) / target
        if target.endswith(".png") and ".." not in target and source.is_file():
            copies[f"docs/{target}"] = source
            return target
        return None

    for name, title, _ in present:
        body = markdown.render((Path(docs_dir) / name).read_text(), keep)
        nav = '<nav><a href="../index.html">version map</a></nav>'
        html[f"docs/{name.replace('.md', '.html')}"] = page(title, nav + body, 1)
    return html, copies, present


def write_site(out: Path, pages: list[VersionPage], results, figures, root: Path,
               drawn: dict | None = None, docs_dir: Path | None = None,
               bench_dir: Path | None = None) -> int:
    """Writes every file of the site; returns how many pages it wrote. drawn: version ->
    (its pictures, why none), from torchlet/docs/pictures.py; docs_dir: where the reader
    documents the index links lie; bench_dir: the benchmark results (the CPU column's source)."""
    out = Path(out)
    drawn = drawn or {}
    reading, copies, present = reading_pages(docs_dir) if docs_dir else ({}, {}, ())
    names = [p.name for p in pages]
    by_name = {p.name: p for p in pages}
    sources = Sources({p.name: p.owned for p in pages})
    pairs = compare.pairs(names)
    files = {"style.css": CSS, "site.js": JS,
             "index.html": index_html(pages, results, figures, pairs,
                                      cpu_source(bench_dir) if bench_dir else "", present),
             **reading}
    for i, p in enumerate(pages):
        prev = names[i - 1] if i else None
        nxt = names[i + 1] if i + 1 < len(names) else None
        pictures, why = drawn.get(p.name, ([], ""))
        files[f"versions/{p.name}.html"] = version_html(p, prev, nxt, results, sources,
                                                        pictures, why)
        files.update({pic.file: pic.svg + "\n" for pic in pictures})
        for part in p.parts:  # a page's sources: its spec modules and the files it owns
            path = source_path("spec", part.path.name)
            files[path] = source_html(path, f"spec/{part.path.name}", part.path.read_text(), p.name)
        for rel in p.owned:
            path = source_path("implementations", p.name, rel)
            files[path] = source_html(path, f"{Path(root).name}/{p.name}/{rel}",
                                      (Path(root) / p.name / rel).read_text(), p.name)
    for path, file in sorted(sources.extra.items()):  # a spec module's page is there already
        files.setdefault(path, source_html(path, str(file.relative_to(sources.repo)),
                                           file.read_text(), None))
    for a, b in pairs:
        named = compare.named_files(b, [part.sections["files"] for part in by_name[b].parts])
        changes, why = methods.method_changes(a, b, root)
        files[f"compare/{compare_name(a, b)}"] = compare_html(
            a, b, compare.file_diffs(a, b, root), named, changes, why)
    for rel in sorted({str(Path(rel).parent) for rel in files}):
        (out / rel).mkdir(parents=True, exist_ok=True)
    for rel, text in sorted(files.items()):
        (out / rel).write_text(text, encoding="utf-8")
    for rel, source in sorted(copies.items()):
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, out / rel)
    return sum(rel.endswith(".html") for rel in files)
