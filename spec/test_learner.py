"""Learner mode, end to end: exercise, check, fill in, check again.

What it introduces: `torchlet exercise vNN DIR` (a tree of versions whose vNN functions are
stubs cut from the reference), `torchlet check DIR` (vNN's specs against it, and what to write
next) and `torchlet diff vA vB` (what a version changes in the files it owns).
Why: the suite is meant for people who learn by filling in one version at a time; they need a
tree that loads like the reference, failures that name the function to write, and a way to see
the previous version's code next to the new one.
Core principle: the reference is the only source. Stubs are generated from it; filling a stub tree
with the reference's files must make the same specs pass, so the tree itself adds nothing.
Files: torchlet/learner.py, torchlet/spec_timeout.py (check's time limit on each spec);
docs/learners.md for the walk-through.
Tradeoff left visible: each end-to-end run starts child pytests (one on the stubs, one on the
filled tree), so this page costs as much as the two versions' specs themselves; the scripted
session through the CLI starts six processes and three child pytests (about 30 s of CPU).
"""
import ast
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import implementations
from torchlet import learner

# v01_0 alone: its exercise tree also holds v00 (finished, the reference's), so it walks every
# step a v00 exercise would and then some; every version's stubs failing its specs, naming the
# stub, is test_meta_stubs.py's.
E2E_VERSIONS = [v for v in ("v01_0_ragged_batch",) if v in implementations.version_names()]


@pytest.fixture
def not_a_learner_run(request):
    if request.config.getoption("--impl-root"):
        pytest.skip("learner mode is tested on the reference, not on a tree given with --impl-root")


@pytest.mark.parametrize("version", E2E_VERSIONS)
def test_an_exercise_fails_naming_what_to_write_and_passes_once_filled_with_the_reference(
        version, tmp_path, capsys, monkeypatch, not_a_learner_run):
    specs = learner.spec_modules(version)
    if not specs:
        pytest.skip(f"{version} has no spec module yet")
    root = tmp_path / "mine"
    assert learner.main(["exercise", version, str(root)]) == 0
    names = implementations.version_names()
    assert implementations.version_names(root) == names[:names.index(version) + 1]

    # Both child runs take the stub runs' Hypothesis profile, as the scripted session's do: what
    # is at stake is the tree (its stubs stop each spec, filled it passes), and the reference's
    # own run of the same specs under the suite's profile is the rest of the suite.
    for key, value in learner.stub_run_env().items():
        monkeypatch.setenv(key, value)
    assert learner.main(["check", str(root), "-k", version]) != 0
    report = capsys.readouterr().out
    order = learner.functions_in_order(root / version)
    first = next(line for line in report.splitlines() if line.startswith("next: implement "))
    assert first.split()[2] in order, report
    assert sorted([first.split()[2], *listed_after(report, "then: ")]) \
        == sorted(learner.stubs_left(root / version)), report
    assert re.search(rf"^{version}: \d+ passed, [1-9]\d* failed", report, re.M), report

    reference = implementations.REFERENCE_ROOT / version
    for path in reference.rglob("*.py"):
        shutil.copy(path, root / version / path.relative_to(reference))
    assert learner.main(["check", str(root), "-k", version]) == 0, capsys.readouterr().out
    assert "every spec of this version passes, and no stub is left" in capsys.readouterr().out


def listed_after(report: str, label: str) -> list[str]:
    """The names a report lists after `label`, over as many lines as the list takes."""
    text = report.split("\n" + label, 1)[1] if "\n" + label in report else ""
    return " ".join(text.split()).split(", ") if text else []


DEMO = (
    "def load(path):\n    return parse(path)\n\n"
    "def parse(path):\n    return path\n\n"
    "def norm(x):\n    return scale(x)\n\n"
    "def scale(x):\n    return x\n\n"
    "class Engine:\n"
    "    def __init__(self, path):\n        self.w = load(path)\n\n"
    "    def run(self, x):\n        return norm(x)\n\n"
    "def build(path):\n    return Engine(path)\n")


def test_check_lists_every_stub_left_in_the_order_the_specs_need_them(tmp_path):
    """Two failing specs ran into the stubs of `build` and `norm`: norm is next (earlier in the
    file), then scale, which norm's reference calls, so its spec reaches scale once norm is
    written; then build, the Engine it makes and what that loads; then run, which no spec
    reached yet."""
    reference, mine = tmp_path / "reference" / "v42_demo", tmp_path / "mine" / "v42_demo"
    for tree in (reference, mine):
        tree.mkdir(parents=True)
    (reference / "model.py").write_text(DEMO)
    (mine / "model.py").write_text(learner.stub_source(DEMO, "v42_demo", "model", []))
    stubs = {}
    exec(compile((mine / "model.py").read_text(), "<stub>", "exec"), stubs)

    def failing(spec, call):  # what a failing spec reports: the stub its call ran into
        with pytest.raises(NotImplementedError) as stopped:
            call()
        return learner.Outcome(f"spec/test_v42_demo.py::{spec}", "failed", str(stopped.value))

    outcomes = [failing("test_build", lambda: stubs["build"]("path")),
                failing("test_norm", lambda: stubs["norm"](1.0))]
    report = learner.summarize("v42_demo", mine, outcomes, reference)
    first = re.search(r"^next: implement (\S+) in ", report, re.M)
    assert first and first[1] == "model.norm", report
    assert listed_after(report, "then: ") == [
        "model.scale", "model.build", "model.Engine.__init__", "model.load", "model.parse",
        "model.Engine.run"], report


def test_a_stub_keeps_signature_and_docstring_and_raises_naming_version_function_and_spec():
    source = (
        "import torch\n\n"
        "class Engine:\n"
        "    def step(self, x: int = 3) -> int:\n"
        '        """One step."""\n'
        "        y = x + 1  # why\n"
        "        return y\n\n"
        "def helper(a, *, b=2): return a + b\n")
    out = learner.stub_source(source, "v42_demo", "engine", [])
    namespace = {}
    exec(compile(out, "<stub>", "exec"), namespace)
    step = namespace["Engine"].step
    assert step.__doc__ == "One step." and "# why" not in out
    assert str(__import__("inspect").signature(step)) == "(self, x: int = 3) -> int"
    with pytest.raises(NotImplementedError, match=r"v42_demo: implement engine\.Engine\.step"):
        step(namespace["Engine"](), 1)
    with pytest.raises(NotImplementedError, match=r"engine\.helper \(no spec module"):
        namespace["helper"](1)
    assert learner.remaining_stubs_in(out) == ["Engine.step", "helper"]


def test_an_earlier_version_the_learner_finished_is_kept_and_an_unfinished_one_refused(tmp_path):
    names = implementations.version_names()
    if len(names) < 2:
        pytest.skip("needs two versions")
    first, second = names[0], names[1]
    root = tmp_path / "mine"
    learner.make_exercise(first, root)
    with pytest.raises(learner.ExerciseError, match="still has stubs"):
        learner.make_exercise(second, root)
    with pytest.raises(learner.ExerciseError, match="may hold your work"):
        learner.make_exercise(first, root)
    fill_with_the_reference(root / first)
    model = root / first / "model.py"
    model.write_text("# the learner's own\n" + model.read_text())
    ex = learner.make_exercise(second, root)
    assert ex.sources[first] == str(root / first)
    assert (root / first / "model.py").read_text().startswith("# the learner's own")


def test_diff_shows_the_files_a_version_owns_against_the_ones_it_replaces():
    names = implementations.version_names()
    if len(names) < 2:
        pytest.skip("needs two versions")
    text = learner.diff(names[1])
    assert text.startswith(f"{names[0]} -> {names[1]}\n")
    assert f"+++ {names[1]}/__init__.py" in text
    for rel, path in learner.effective_modules(names[1]).items():
        if path.is_relative_to(implementations.REFERENCE_ROOT / names[1]):
            assert f"+++ {names[1]}/{rel}" in text
        else:
            assert f"+++ {names[1]}/{rel}" not in text


def test_a_spec_module_belongs_to_the_version_its_name_gives():
    for version in implementations.version_names():
        major = version.split("_")[0]
        for path in learner.spec_modules(version):
            assert path.name.startswith(f"test_{major}_")


def test_check_never_calls_a_version_done_while_a_stub_is_left_even_one_no_spec_reaches(
        tmp_path, capsys, monkeypatch, not_a_learner_run):
    version = implementations.version_names()[0]
    root = tmp_path / "mine"
    learner.make_exercise(version, root)
    reference = implementations.REFERENCE_ROOT / version
    for path in reference.rglob("*.py"):
        shutil.copy(path, root / version / path.relative_to(reference))
    model = root / version / "model.py"
    stub = learner.stub_source("def unreached(x):\n    return x\n", version, "model", [])
    model.write_text(model.read_text() + "\n\n" + stub)
    passing = [learner.Outcome("spec/test_x.py::test_y", "passed")]

    class Proc:
        returncode, stdout, stderr = 0, "", ""

    monkeypatch.setattr(learner, "run_specs", lambda *a, **k: (passing, Proc()))
    assert learner.main(["check", str(root), "-k", version]) != 0
    report = capsys.readouterr().out
    assert "model.unreached" in report and "not done" in report, report
    assert "no stub is left" not in report


def test_pytest_takes_impl_root_and_its_directory_as_two_words_as_the_readme_writes_it(
        tmp_path, not_a_learner_run):
    """Collected from testpaths as the README's command is, from one page: what is at stake is
    how pytest reads the command line, before it collects anything. pytest takes DIR for its
    root directory (docs/testing.md), and reads testpaths only when run from its root: from the
    repository it would collect the whole repository (1411 specs, 10 s), so the command runs
    from DIR and names the page by its full path."""
    root = tmp_path / "mine"
    learner.make_exercise(implementations.version_names()[0], root)
    page = learner.REPO / "spec" / "test_v00_layers.py"
    proc = subprocess.run([sys.executable, "-m", "pytest", "--impl-root", str(root), "-k", "v00",
                           "-o", f"testpaths={page}",
                           "--collect-only", "-q", "-p", "no:randomly", "--no-owned-coverage",
                           "--snapshot-warn-unused"],
                          cwd=root, env=learner.child_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " tests collected" in proc.stdout and "v00_full_recompute" in proc.stdout
    assert "::test_rms_norm_equals_hf[" in proc.stdout, proc.stdout[-2000:]  # the page's specs


def test_a_learners_pytest_run_reports_each_stub_in_a_line_and_ends_pointing_at_check(
        tmp_path, not_a_learner_run):
    """`pytest --impl-root=DIR -k v00` on a fresh exercise: a spec stopped by a stub reports the
    stub's line and no traceback, and the run ends by pointing at `torchlet check`, never at
    `--snapshot-update` (the golden files, which the tree's versions leave unread, are the
    reference suite's). Collected from testpaths as the learner's run is, but from the page of
    refusals alone, whose specs all stop at the first stub, so that it costs about the imports
    (and without the unraisable-exception check, whose gc passes at exit cost seconds)."""
    version = implementations.version_names()[0]
    root = tmp_path / "mine"
    learner.make_exercise(version, root)
    page = "spec/test_v00_bad_input.py"
    proc = subprocess.run([sys.executable, "-m", "pytest", f"--impl-root={root}",
                           "-k", version.split("_")[0], "-o", f"testpaths={page}",
                           "-p", "no:randomly", "-p", "no:unraisableexception"],
                          cwd=learner.REPO, env=learner.child_env(), capture_output=True,
                          text=True)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    stopped = re.findall(rf"^{version}: implement ([\w.]+) \(", out, re.M)
    assert stopped and not re.search(r"^(E |>   )", out, re.M), out[-3000:]
    *_, pointer, stats = out.strip().splitlines()
    assert pointer.startswith(f"`torchlet check {root} -k {version}`"), out[-3000:]
    failing = re.findall(r"\b(\d+) (?:failed|errors?)\b", stats)
    assert stats.startswith("=") and sum(map(int, failing)) == len(stopped), out[-3000:]
    assert "--snapshot-update" not in out, out[-3000:]


def fill_with_the_reference(version_dir: Path) -> None:
    """Write every stub of an exercise back as the reference has it, as a learner finishing the
    version does: file by file, in the directory exercise wrote."""
    reference = implementations.REFERENCE_ROOT / version_dir.name
    for path in reference.rglob("*.py"):
        shutil.copy(path, version_dir / path.relative_to(reference))


def fill(path: Path, stubs: str, qualname: str, body: str) -> int:
    """Write `path` as the module `stubs` with the stub's raise replaced by `body`, as a learner
    fills it in; the line the body starts on."""
    lines = stubs.splitlines(keepends=True)
    node = dict(learner.functions(ast.parse(stubs).body))[qualname]
    stub = node.body[-1]
    pad = " " * stub.col_offset
    lines[stub.lineno - 1:stub.end_lineno] = [pad + line + "\n" for line in body.splitlines()]
    path.write_text("".join(lines))
    return stub.lineno


def torchlet(*words, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI as a learner runs it, in a process of its own. The Hypothesis profile of stub
    runs keeps the child pytests short; what each step checks does not depend on it."""
    return subprocess.run([sys.executable, "-m", "torchlet", *map(str, words)], cwd=cwd,
                          env={**learner.child_env(), **learner.stub_run_env()},
                          capture_output=True, text=True)


def one_line(proc: subprocess.CompletedProcess) -> str:
    """A refusal's stderr: one line, and no traceback anywhere."""
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-2000:] + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


def test_a_scripted_learner_session_from_exercise_to_the_next_version(tmp_path,
                                                                      not_a_learner_run):
    """exercise, a syntax error, an endless stub, a wrong fill, a right fill, the next version:
    each through the CLI, as a learner types it. The stub filled is the engine's `assemble`,
    which the first spec's fixture reaches after reading a checkpoint from disk (milliseconds,
    so a 1 s limit can only stop the loop), and the failing checks stop there: the time limit
    stops the endless stub's run, `-- -x` the wrong fill's. The next version's check on its
    stubs is the first test's (v01_0's); here, its exercise and the command it prints."""
    first, second = learner.resolve("v00"), learner.resolve("v01_0")
    root = tmp_path / "mine"
    done = torchlet("exercise", "v00", root, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    hint = shlex.split(re.search(r"^next: torchlet (check .*)$", done.stdout, re.M)[1])
    loop = root / first / "loop.py"
    stubs, qualname = loop.read_text(), "FullRecomputeEngine.assemble"

    line = fill(loop, stubs, qualname, "return cls(a.checkpoint a.device, a.dtype)")
    refused = torchlet(*hint, cwd=tmp_path)  # the command exercise printed, word for word
    assert re.fullmatch(rf"{re.escape(str(loop))}:{line}: \S.*", one_line(refused))
    assert refused.stdout == ""

    fill(loop, stubs, qualname, "while a:\n    pass")
    endless = torchlet("check", root, "-k", "v00", "--timeout", "1", cwd=tmp_path)
    assert endless.returncode != 0, endless.stdout
    assert "Traceback" not in endless.stdout + endless.stderr, endless.stderr
    assert f"next: make loop.{qualname} return (it was still at {loop}:" in endless.stdout, \
        endless.stdout

    fill(loop, stubs, qualname, "return None")
    wrong = torchlet("check", root, "-k", "v00", "--", "-x", cwd=tmp_path)
    assert wrong.returncode != 0, wrong.stdout
    assert re.search(r"^next: make \S+ pass \(no stub left in its way\)$", wrong.stdout, re.M), \
        wrong.stdout

    fill_with_the_reference(root / first)
    right = torchlet("check", root, cwd=tmp_path)
    assert right.returncode == 0, right.stdout[-3000:] + right.stderr[-2000:]
    assert "every spec of this version passes, and no stub is left" in right.stdout
    # a green check points to the next version: its line, run as printed
    hint = f"next: torchlet exercise {second} {root}"
    assert hint + "\n" in right.stdout, right.stdout[-2000:]

    following = torchlet(*hint.split()[2:], cwd=tmp_path)
    assert following.returncode == 0, following.stderr
    assert f"  {first} from {root / first}\n" in following.stdout, following.stdout
    assert f"next: torchlet check {root} -k {second}\n" in following.stdout, following.stdout
    assert learner.stubs_left(root / second) and not learner.stubs_left(root / first)


# ---------------------------------------------------------------- issue 43, defects 1-4

def test_exercise_refuses_the_projects_reference_tree_even_with_force_and_touches_nothing(
        monkeypatch, capsys):
    """`torchlet exercise v06 implementations --force` once deleted the reference's v06 and then
    failed to copy it back. The reference, a version in it and the repository around it are
    refused, before anything is written or deleted (each is made to fail here if tried)."""
    def touched(*args, **kwargs):
        raise AssertionError(f"exercise touched {args[:1]}")

    for name in ("rmtree", "copytree", "copy", "copy2"):
        monkeypatch.setattr(shutil, name, touched)
    monkeypatch.setattr(Path, "write_text", touched)
    monkeypatch.setattr(Path, "mkdir", touched)
    reference = implementations.REFERENCE_ROOT
    first = implementations.version_names()[0]
    for dest in (reference, reference / first, reference.parent):
        assert learner.main(["exercise", first, str(dest), "--force"]) != 0
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "reference versions" in err, err


def test_exercise_refuses_a_tree_holding_a_version_it_did_not_write(tmp_path):
    """A copy of the reference (or any tree whose versions exercise did not write) is refused by
    the CLI in one line, --force or not, and left byte for byte as it was."""
    first = implementations.version_names()[0]
    clone = tmp_path / "clone"  # not "copy": the CLI runs in tmp_path, and would import it
    shutil.copytree(implementations.REFERENCE_ROOT / first, clone / first)
    shutil.copy(implementations.REFERENCE_ROOT / "__init__.py", clone / "__init__.py")
    before = {p: p.read_bytes() for p in clone.rglob("*") if p.is_file()}
    refused = torchlet("exercise", first, clone, "--force", cwd=tmp_path)
    assert "not written by `torchlet exercise`" in one_line(refused)
    assert {p: p.read_bytes() for p in clone.rglob("*") if p.is_file()} == before


def test_force_replaces_the_stubs_exercise_wrote_and_refuses_a_version_it_did_not(tmp_path):
    first, second = implementations.version_names()[:2]
    root = tmp_path / "mine"
    learner.make_exercise(first, root)
    model = root / first / "model.py"
    model.write_text("# begun\n" + model.read_text())
    learner.make_exercise(first, root, force=True)
    assert not model.read_text().startswith("# begun") and learner.stubs_left(root / first)

    shutil.copytree(implementations.REFERENCE_ROOT / second, root / second)  # not exercise's
    with pytest.raises(learner.ExerciseError, match="not written by"):
        learner.make_exercise(second, root, force=True)
    assert not learner.stubs_left(root / second)


class Ran:
    """What check asked run_specs for, in place of a child pytest."""
    returncode, stdout, stderr = 5, "", ""

    def __init__(self):
        self.calls = []

    def __call__(self, root, version, specs, extra=(), **options):
        self.calls.append((version, list(extra)))
        return [], self


def test_check_takes_its_version_before_or_after_dir_and_gives_pytest_what_follows_the_dashes(
        tmp_path, monkeypatch):
    """`check DIR -k v00`, the form docs/learners.md and exercise's hint print, once passed
    `-k v00` to pytest and checked the newest version in DIR instead."""
    first, second = learner.resolve("v00"), learner.resolve("v01_0")
    root = tmp_path / "mine"
    learner.make_exercise(second, root)  # holds first and second: the newest is not the one asked
    ran = Ran()
    monkeypatch.setattr(learner, "run_specs", ran)
    for words, extra in [([str(root), "-k", "v00"], []), (["-k", "v00", str(root)], []),
                         ([str(root), "-k", "v00", "--", "-x"], ["-x"])]:
        learner.main(["check", *words])
        assert ran.calls.pop() == (first, extra), words
    learner.main(["check", str(root), "--", "-x"])
    assert ran.calls.pop() == (second, ["-x"])


def test_check_refuses_an_unknown_version_in_one_line_naming_the_known_ones(
        tmp_path, monkeypatch, capsys):
    first = implementations.version_names()[0]
    root = tmp_path / "mine"
    learner.make_exercise(first, root)
    monkeypatch.setattr(learner, "run_specs", Ran())
    for words in (["-k", "v99", str(root)], [str(root), "-k", "v99"]):
        assert learner.main(["check", *words]) != 0
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "'v99'" in err and first in err, err


def test_check_reports_a_syntax_error_as_file_line_message_and_runs_no_spec(
        tmp_path, monkeypatch, capsys):
    """A learner's most common mistake once ended in a traceback through learner.py whose last
    frame was `File "<unknown>", line 33`."""
    first = implementations.version_names()[0]
    root = tmp_path / "mine"
    learner.make_exercise(first, root)
    model = root / first / "model.py"
    model.write_text(model.read_text() + "\ndef broken(:\n    pass\n")
    line = len(model.read_text().splitlines()) - 1
    ran = Ran()
    monkeypatch.setattr(learner, "run_specs", ran)
    assert learner.main(["check", str(root)]) != 0
    out, err = capsys.readouterr()
    assert re.fullmatch(rf"{re.escape(str(model))}:{line}: \S.*\n", err) and not out, (out, err)
    assert not ran.calls


def test_a_spec_past_the_time_limit_fails_naming_the_function_that_did_not_return_and_stops(
        tmp_path):
    """`check` on a stub that loops forever once hung with no output. A page of two specs
    against a one-function tree, collected outside the suite (no conftest, so the child costs
    about pytest's start-up) under a 1 s limit: the first spec fails naming the function and its
    line, the second never runs, and check's summary says what to make return."""
    tree = tmp_path / "mine"
    (tree / "v42_demo").mkdir(parents=True)
    (tree / "v42_demo" / "__init__.py").write_text("")
    model = tree / "v42_demo" / "model.py"
    model.write_text("def spin(x):\n    while x:\n        x += 1\n")
    (tmp_path / "test_demo.py").write_text(
        f"import sys\nsys.path.insert(0, {str(tree)!r})\nfrom v42_demo import model\n\n\n"
        "def test_spin():\n    model.spin(1)\n\n\ndef test_after():\n    pass\n")
    xml = tmp_path / "junit.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", "test_demo.py", f"--impl-root={tree}",
                           "-p", "torchlet.spec_timeout", "--spec-timeout=1", f"--junitxml={xml}",
                           "-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist"],
                          cwd=tmp_path, env=learner.child_env(), capture_output=True, text=True)
    outcomes = learner.read_junit(xml) if xml.exists() else []
    assert [o.status for o in outcomes] == ["failed"], proc.stdout[-3000:] + proc.stderr[-2000:]
    stuck = learner.timed_out(outcomes[0])
    assert stuck and stuck.group(1, 2) == ("v42_demo", "model.spin"), outcomes[0].message
    assert stuck[4] in (f"{model}:2", f"{model}:3"), stuck[4]
    report = learner.summarize("v42_demo", tree / "v42_demo", outcomes)
    assert f"next: make model.spin return (it was still at {stuck[4]} after 1 s" in report, report
