"""Parametrizes specs over implementations by capability.

A spec module declares `pytestmark = pytest.mark.needs(CAPABILITY)` (or marks one test); every
test that takes the `impl` fixture then runs once per version that declares that capability
(`needs(CAPABILITY, until=LATER)`: and not LATER, a later idea that changes the property). The
version name is the test id and a marker (`pytest -k v08`, `pytest -m v08_paged_gqa_py`); the
capability is a marker too (`pytest -m kv_cache`). `--impl-root DIR` runs the same specs against
another tree of versions, such as a learner's. A part's own spec (`pytest.mark.part("kv")`) runs
only against the versions whose recipe writes that part (spec/support/collection/parts.py).
"""
from __future__ import annotations

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
from spec.support.collection import kernel_mode, parts, selection, shared_parts, trees  # noqa: E402
from spec.support.oracles import decode_ahead as overlap  # noqa: E402
from torchlet.contract import ALL_CAPABILITIES  # noqa: E402

pytest_plugins = ["spec.support.checks.snapshots"]  # what a run owes the golden files


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.has_plugin("torchlet"):  # installed without the entry point
        from torchlet import pytest_plugin

        pytest_plugin.pytest_addoption(parser)
    owned_coverage.addoption(parser)
    parts.addoption(parser)


def impl_root(config) -> Path:
    root = config.getoption("--impl-root")
    return Path(root).resolve() if root else implementations.REFERENCE_ROOT


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(capability, until=None): run over versions that declare "
                                       "it (and not `until`, whose idea changes the property)")
    config.addinivalue_line("markers", "gpu: needs CUDA; skipped on a CPU-only machine")
    config.addinivalue_line("markers", "gpu2: needs 2 CUDA GPUs (NCCL between them); skipped, "
                                       "saying so, where there are fewer")
    config.addinivalue_line("markers", "real_model: runs the SmolLM2-135M model")
    config.addinivalue_line("markers", "mutants: a breakage of the reference its specs must notice")
    config.addinivalue_line("markers", "one_step_per_call: watches what one step() call runs; "
                                       "skipped where a step launches the next (spec/support/oracles/decode_ahead.py)")
    config.addinivalue_line("markers", "engine_parts: drives the engine's parts over random schedules; "
                                       "on a CPU skipped for a version that adds kernels alone "
                                       "(spec/support/collection/shared_parts.py)")
    config.addinivalue_line("markers", "kernel_path: tests a version's own code that runs only where "
                                       "its layers run kernels (v15's slice graphs): on CPU under the "
                                       "interpreter, though it writes none (spec/support/collection/kernel_mode.py)")
    config.addinivalue_line("markers", "kernels: runs Triton kernels on CPU, so only for versions "
                                       "that write them (spec/support/collection/kernel_mode.py)")
    config.addinivalue_line("markers", parts.HELP)
    config.addinivalue_line("markers", parts.SUBJECT_HELP)
    if any(map(config.pluginmanager.hasplugin, ("xdist", "xdist.plugin"))):
        config.pluginmanager.register(parts.FromWorkers(), "parts-from-workers")
    if owned_coverage.wanted(config):
        config.pluginmanager.register(owned_coverage.OwnedCoverage(config), "owned-coverage")
    if config.getoption("--impl-root"):
        from torchlet.pytest_plugin import StubReports

        config.pluginmanager.register(StubReports(config.getoption("--impl-root")), "stub-reports")
    for cap in ALL_CAPABILITIES:
        config.addinivalue_line("markers", f"{cap}: specs of the {cap} capability")
    for name in implementations.version_names(impl_root(config)):
        config.addinivalue_line("markers", f"{name}: specs run against {name}")


def pytest_generate_tests(metafunc):
    if "impl" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("needs")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} takes `impl` but has no needs() mark")
    capability, until = marker.args[0], marker.kwargs.get("until")
    # until=LATER: a property the LATER capability's idea changes, so not held from it on.
    versions = [v for v in trees.versions(impl_root(metafunc.config))
                if capability in v.capabilities and until not in v.capabilities]
    params = [pytest.param(v, id=v.name, marks=[getattr(pytest.mark, v.name),
                                                 getattr(pytest.mark, capability)])
              for v in versions]
    if not params:
        params = [pytest.param(None, id="no-version",
                               marks=pytest.mark.skip(reason=f"no version declares {capability}"))]
    metafunc.parametrize("impl", params, scope="module")


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
    overlap.before(item)
    shared_parts.before(item)
    kernel_mode.before(item)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    # -k applies after the other plugins' hooks: syrupy records the collection here, and had it
    # seen only what `-k v08` keeps, it would take the run for the whole suite and fail it on
    # the golden entries that only other versions read. A part's own specs for the versions that
    # took the part unchanged go first: they are not in the suite, not a partial run's leftovers.
    parts.deselect(config, items)
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
    return result


@pytest.hookimpl(wrapper=True)  # after syrupy's, which puts back the status it was given
def pytest_sessionfinish(session):
    result = yield
    parts.nothing_left_to_run(session)
    return result
