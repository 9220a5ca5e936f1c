"""Meta: the specs themselves, checked against empty versions.

What it checks: for every version, an exercise tree whose version functions all raise
NotImplementedError (`torchlet exercise`) makes every one of that version's own spec modules fail,
and the stubs keep the reference's signatures.
Why: a spec that passes on an empty stub checks nothing the learner writes (it tests the harness,
the oracle or the reference), and a learner who meets one believes a function works that doesn't
exist. A stub with a different signature would teach the wrong interface.
Core principle: stubs are generated from the reference source every run, never kept, so this
page can't drift from the versions; each version's specs run in a child pytest pointed at its
stub tree with `--impl-root` and `-k <version>`, and any spec that passes there is a defect.
Files: torchlet/learner.py (the stub generator) against implementations/vNN_*/.
Tradeoff left visible: the child pytest runs in one interpreter reused for every version (the
mutants' worker, spec/mutants/worker.py), so a version costs its specs, not a torch import; a
crash in one run would end the others. A version with no spec module yet is skipped, not passed.
That the reference passes is the rest of the suite.
"""
import ast
import functools
import inspect
import time

import pytest

import implementations
from spec.mutants.runner import Worker
from torchlet import learner

VERSIONS = implementations.version_names()



@pytest.fixture
def stub_tree(request, tmp_path):
    if request.config.getoption("--impl-root"):
        pytest.skip("meta-specs check the reference suite, not a tree given with --impl-root")
    return lambda version: learner.make_exercise(version, tmp_path / "tree")


@pytest.fixture(scope="module")
def worker():
    """One child interpreter for every version's stub run (the mutants' worker)."""
    w = Worker(env=learner.stub_run_env())
    yield w
    w.close()


def run_on_stubs(worker, root, version, specs, tmp_path):
    xml, log = tmp_path / "junit.xml", tmp_path / "pytest.log"
    worker.pytest([*learner.spec_args(root, version, specs, xml), "-p", "no:xdist",
                   "-p", "no:cacheprovider"], log)
    return (learner.read_junit(xml) if xml.exists() else []), log.read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_spec_of_a_version_fails_against_its_pristine_stubs(version, stub_tree, worker,
                                                                 tmp_path, record_property):
    specs = learner.spec_modules(version)
    if not specs:
        pytest.skip(f"{version} has no spec module (spec/test_{version[:3]}_*.py) yet")
    tree = stub_tree(version)
    start = time.perf_counter()
    outcomes, log = run_on_stubs(worker, tree.root, version, specs, tmp_path)
    record_property("child_pytest_seconds", round(time.perf_counter() - start, 1))
    assert outcomes, f"no spec of {version} ran:\n{log[-4000:]}"
    passed = [o.test for o in outcomes if o.status == "passed"]
    unclear = [f"{o.test}: {learner.reason(o)}" for o in outcomes
               if o.status == "failed" and not learner.stub_hits(o)]
    defects = []
    if passed:
        defects.append(f"{len(passed)} spec(s) pass against stubs that raise NotImplementedError; "
                       f"each checks nothing the version's code does:\n  " + "\n  ".join(passed))
    if unclear:
        defects.append(f"{len(unclear)} spec(s) fail without naming the stub that stopped them, "
                       f"so a learner can't tell what to write:\n  " + "\n  ".join(unclear))
    assert not defects, f"{version}: " + "\n".join(defects)
    assert any(o.status == "failed" for o in outcomes), f"every spec of {version} was skipped"


def _function(module, qualname: str):
    """The plain function behind a module-level name or a method: unwrapped from staticmethod,
    classmethod, property, cached_property, functools.wraps decorators and triton.jit."""
    obj = module
    for part in qualname.split("."):
        obj = inspect.getattr_static(obj, part)
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    if isinstance(obj, functools.cached_property):
        obj = obj.func
    obj = getattr(obj, "fn", obj)  # a triton JITFunction keeps the Python function here
    return inspect.unwrap(obj)


def _in_tree(name: str, trees: set[str]) -> str:
    """A module name without its tree's package (`implementations` or a stub tree's alias)."""
    return name.split(".", 1)[1] if name.split(".")[0] in trees else name


def _comparable(value, trees: set[str]):
    """A default value as compared across trees: modules, functions, classes and instances of the
    tree's classes by their name inside the tree (the stub tree's `layers` is not the reference's
    object, but is the same module's instance of the same class)."""
    if inspect.ismodule(value):
        return "module " + _in_tree(value.__name__, trees)
    if inspect.isfunction(value) or inspect.isclass(value):
        return f"{_in_tree(value.__module__, trees)}.{value.__qualname__}"
    if type(value).__module__.split(".")[0] in trees:
        return f"{_comparable(type(value), trees)}()"
    return value


def _shape(signature: inspect.Signature, trees: set[str]):
    return [(p.name, p.kind, str(p.annotation), _comparable(p.default, trees))
            for p in signature.parameters.values()], str(signature.return_annotation)


@pytest.mark.parametrize("version", VERSIONS)
def test_stubs_keep_the_reference_signatures_and_stub_every_function(version, stub_tree):
    tree = stub_tree(version)
    ref_pkg = implementations.load(version).package
    stub_pkg = implementations.load(version, tree.root).package
    trees = {"implementations", stub_pkg.__name__.split(".")[0]}
    ref_dir, stub_dir = implementations.REFERENCE_ROOT / version, tree.root / version
    checked = 0
    for path in sorted(ref_dir.rglob("*.py")):
        module = learner.module_name(ref_dir, path)
        names = [q for q, _ in learner.functions(ast.parse(path.read_text()).body)]
        stub_path = stub_dir / path.relative_to(ref_dir)
        assert learner.remaining_stubs(stub_path) == names, f"{stub_path}: not every body stubbed"
        if module == "__init__":
            ref_mod, stub_mod = ref_pkg, stub_pkg
        else:
            ref_mod = __import__(f"{ref_pkg.__name__}.{module}", fromlist=["_"])
            stub_mod = __import__(f"{stub_pkg.__name__}.{module}", fromlist=["_"])
        for qualname in names:
            try:
                ref = _function(ref_mod, qualname)
            except AttributeError:  # defined under a condition that didn't hold here
                continue
            ours = _function(stub_mod, qualname)
            ours_shape, ref_shape = (_shape(inspect.signature(f), trees) for f in (ours, ref))
            assert ours_shape == ref_shape, f"{module}.{qualname}"
            assert inspect.getdoc(ours) == inspect.getdoc(ref), f"{module}.{qualname}: docstring"
            checked += 1
    assert checked, f"{version} has no function to compare"
