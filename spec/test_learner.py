"""Learner mode, end to end: exercise, check, fill in, check again.

What it introduces: `torchlet exercise vNN DIR` (a tree of versions whose vNN functions are
stubs cut from the reference), `torchlet check DIR` (vNN's specs against it, and what to write
next) and `torchlet diff vA vB` (what a version changes in the files it owns).
Why: the suite is meant for people who learn by filling in one version at a time; they need a
tree that loads like the reference, failures that name the function to write, and a way to see
the previous version's code next to the new one.
Core principle: the reference is the only source. Stubs are generated from it; filling a stub tree
with the reference's files must make the same specs pass, so the tree itself adds nothing.
Files: torchlet/learner.py; docs/learners.md for the walk-through.
Tradeoff left visible: each end-to-end run starts child pytests (one on the stubs, one on the
filled tree), so this page costs as much as the two versions' specs themselves.
"""
import re
import shutil

import pytest

import implementations
from torchlet import learner

E2E_VERSIONS = [v for v in ("v00_full_recompute", "v01_0_ragged_batch")
                if v in implementations.version_names()]


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

    with monkeypatch.context() as env:
        for key, value in learner.stub_run_env().items():
            env.setenv(key, value)
        assert learner.main(["check", str(root), "-k", version]) != 0
    report = capsys.readouterr().out
    order = learner.functions_in_order(root / version)
    first = next(line for line in report.splitlines() if line.startswith("next: implement "))
    assert first.split()[2] in order, report
    assert re.search(rf"^{version}: \d+ passed, [1-9]\d* failed", report, re.M), report

    reference = implementations.REFERENCE_ROOT / version
    for path in reference.rglob("*.py"):
        shutil.copy(path, root / version / path.relative_to(reference))
    assert learner.main(["check", str(root), "-k", version]) == 0, capsys.readouterr().out
    assert "every spec of this version passes, and no stub is left" in capsys.readouterr().out


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
    shutil.rmtree(root / first)
    shutil.copytree(implementations.REFERENCE_ROOT / first, root / first)
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
    import subprocess
    import sys

    root = tmp_path / "mine"
    learner.make_exercise(implementations.version_names()[0], root)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--impl-root", str(root), "-k", "v00",
                           "--collect-only", "-q", "-p", "no:randomly", "--no-owned-coverage",
                           "--snapshot-warn-unused"],
                          cwd=learner.REPO, env=learner.child_env(), capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " tests collected" in proc.stdout and "v00_full_recompute" in proc.stdout
