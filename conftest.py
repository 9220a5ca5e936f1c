"""Parametrizes specs over implementations, by one rule (spec/support/collection/rule.py).

A spec module declares `pytestmark = pytest.mark.spec(needs=CAPABILITY)` (or marks one test);
every test that takes the `impl` fixture then runs once per version that declares that
capability (`spec(needs=CAPABILITY, until=LATER)`: and not LATER, a later idea that changes the
property). The version name is the test id and a marker (`pytest -k v08`, `pytest -m
v08_paged_gqa_py`); the capability is a marker too (`pytest -m kv_cache`). `--impl-root DIR`
runs the same specs against another tree of versions, such as a learner's. The marker's other
arguments (part, subject, first_with, one_step_per_call, engine_parts, kernels, kernel_path)
leave a version out or skip it, each decided once at collection; `pytest --why vNN` prints
every decision for a version.
"""
from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    # Triton's interpreter must be chosen before any @triton.jit runs (i.e. before collection).
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The specs' tensors are tiny: with more than one thread, small ops cost far more in thread
# hand-offs than in arithmetic (a [14, 30] softmax: 4.5 ms with 2 threads, 3.5 us with 1).
torch.set_num_threads(1)

import implementations  # noqa: E402
from spec.support.collection import hypothesis_profiles  # noqa: E402,F401  (registers the profiles)
from spec.support.checks import owned_coverage  # noqa: E402
from spec.support.collection import parts, rule, selection, trees, why  # noqa: E402
from torchlet.contract import ALL_CAPABILITIES  # noqa: E402

pytest_plugins = ["spec.support.checks.snapshots"]  # what a run owes the golden files

# torch and the rest imported above live as long as the process: out of the collector's sight,
# the full collections that collecting 5000 specs sets off skip them (a whole-suite collection:
# 7.9 s of CPU, 5.9 s with them frozen, in every xdist worker and child pytest).
gc.freeze()

if os.environ.get("TRITON_INTERPRET") == "1":
    # After the freeze: triton imported before it would stay in the frozen heap, and nanobind
    # reports each of its functions still alive there as a leak when the process ends.
    from spec.support.speed import interpreter
    interpreter.install()


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.has_plugin("torchlet"):  # installed without the entry point
        from torchlet import pytest_plugin

        pytest_plugin.pytest_addoption(parser)
    owned_coverage.addoption(parser)
    parts.addoption(parser)
    why.addoption(parser)


def impl_root(config) -> Path:
    root = config.getoption("--impl-root")
    return Path(root).resolve() if root else implementations.REFERENCE_ROOT


def pytest_configure(config):
    config.addinivalue_line("markers", rule.HELP)
    config.addinivalue_line("markers", "gpu: needs CUDA; skipped on a CPU-only machine")
    config.addinivalue_line("markers", "gpu2: needs 2 CUDA GPUs (NCCL between them); skipped, "
                                       "saying so, where there are fewer")
    config.addinivalue_line("markers", "real_model: runs the SmolLM2-135M model")
    config.addinivalue_line("markers", "mutants: a breakage of the reference its specs must notice")
    config.addinivalue_line("markers", "kernels: put by the rule on the specs whose marker says "
                                       "spec(kernels=True), for `-m kernels`")
    if any(map(config.pluginmanager.hasplugin, ("xdist", "xdist.plugin"))):
        config.pluginmanager.register(parts.FromWorkers(), "parts-from-workers")
    if owned_coverage.wanted(config) and not config.getoption("--why"):  # --why runs nothing
        config.pluginmanager.register(owned_coverage.OwnedCoverage(config), "owned-coverage")
    if config.getoption("--impl-root"):
        from torchlet.pytest_plugin import StubReports

        config.pluginmanager.register(StubReports(config.getoption("--impl-root")), "stub-reports")
    for cap in ALL_CAPABILITIES:
        config.addinivalue_line("markers", f"{cap}: specs of the {cap} capability")
    for name in implementations.version_names(impl_root(config)):
        config.addinivalue_line("markers", f"{name}: specs run against {name}")


def pytest_generate_tests(metafunc):
    if "impl" in metafunc.fixturenames:
        rule.parametrize(metafunc, trees.versions(impl_root(metafunc.config)))


@pytest.fixture(scope="session")
def mutants_worker():
    """The mutants' child interpreter (spec/mutants/worker.py), one per pytest process, for every
    meta-spec page whose nested pytest runs take its settings: the mutants' runs and the
    selection pages'. A page then costs its runs, not another interpreter's torch import and
    first collection (about 4 s a page and process here). The stub runs, with the `stubs`
    Hypothesis profile, keep their own (spec/test_meta_stubs.py)."""
    from spec.mutants.runner import Worker

    worker = Worker()
    yield worker
    worker.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    rule.before(item)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    # -k applies after the other plugins' hooks: syrupy records the collection here, and had it
    # seen only what `-k v08` keeps, it would take the run for the whole suite and fail it on
    # the golden entries that only other versions read. The rule goes first: the specs it leaves
    # out (a part's own, for the versions that took the part unchanged) are not in the suite,
    # not a partial run's leftovers.
    rule.apply(config, items)
    keyword = selection.take_keyword(config)
    result = yield
    selection.select(config, items, trees.names(impl_root(config)), keyword)
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)
    elif torch.cuda.device_count() < 2:
        skip = pytest.mark.skip(reason=f"needs 2 CUDA GPUs; this machine has "
                                       f"{torch.cuda.device_count()}")
        for item in items:
            if item.get_closest_marker("gpu2"):
                item.add_marker(skip)
    if config.getoption("--why"):
        why.report(config, items, trees.names(impl_root(config)))
    return result


@pytest.hookimpl(wrapper=True)  # after syrupy's, which puts back the status it was given
def pytest_sessionfinish(session):
    result = yield
    parts.nothing_left_to_run(session)
    return result
