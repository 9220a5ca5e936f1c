"""A pytest plugin: every function a version owns is entered by some spec run against it.

A version's specs are every spec parametrized with it (`pytest -m <version>`): capabilities are
cumulative, so v06 is specified by the kv_cache, request_states, ... specs as much as by its own
page. A function in a version's files that none of them enters is code no spec checks: a learner
could leave it a stub and still see every spec pass.

How: while the plugin runs, the reference versions are imported through a loader that adds one
call at the top of every function body they define (module level and in classes): it records
(version of the running test, function). Line numbers and everything else stay as in the file,
and nothing is cached to __pycache__. Code of v03 run by a v05 spec counts for v05, not for v03.
coverage.py would say the same but costs half the suite's time again here, because it traces
every frame; the entry call costs one set insertion per call. Triton kernels are left alone (the
interpreter runs a copy of their source).

At the end (on the xdist controller, from what each worker sends), every function never entered
by its own version's specs fails the run, by name. It runs on whole-suite runs only (no -k, -m,
paths, or --impl-root): a partial run leaves functions unentered by design. `--owned-coverage`
forces it, `--no-owned-coverage` skips it.
"""
from __future__ import annotations

import ast
import builtins
import importlib.abc
import importlib.machinery
import json
import sys
from pathlib import Path

import pytest
import torch

import implementations
from spec.support.collection.selection import impl_of

ROOT = implementations.REFERENCE_ROOT
HOOK = "__torchlet_entered__"

# Functions no CPU run can enter, with the reason. The gpu specs run them on the H200.
GPU_ONLY = {
    "v07_cuda_graph/graphs.py:CudaGraph.__init__": "captures a CUDA graph",
    "v07_cuda_graph/graphs.py:CudaGraph.replay": "replays a CUDA graph",
    "v18_quantized_weights/gpu_kernels.py:_sm_count": "reads a CUDA device's SM count",
}
# Functions that run only on the ranks of a group of two or more: child processes of
# spec/test_v16_tensor_parallel.py (spec/support/ranks/ranks.py), which this plugin does not watch.
# Its specs there fail when they are stubs (its mutants show it); recording the children's
# entries is still to do.
RANKS_ONLY = {f"v16_tensor_parallel/{key}" for key in (
    "loop.py:TensorParallelEngine.broadcast", "loop.py:TensorParallelEngine.close",
    "loop.py:TensorParallelEngine.follow", "model.py:collective",
    "model.py:VocabShard.__getitem__", "model.py:ShardedWeights.from_checkpoint",
    "model.py:ShardedOps.output_projection", "model.py:ShardedOps.mlp",
    "model.py:ShardedOps.lm_head", "shard.py:Shard.vocab_width",
    "shard.py:Shard.local_config", "shard.py:rows", "shard.py:columns",
    "shard.py:shard_checkpoint")} | {"v07_cuda_graph/graphs.py:_wait_for"}


def addoption(parser):
    group = parser.getgroup("owned coverage")
    group.addoption("--owned-coverage", action="store_true", default=None,
                    help="fail when a function a version owns is entered by none of its specs")
    group.addoption("--no-owned-coverage", action="store_false", dest="owned_coverage")


def wanted(config) -> bool:
    if config.getoption("owned_coverage") is not None:
        return config.getoption("owned_coverage")
    o = config.option
    if o.keyword or o.markexpr or config.getoption("--impl-root"):
        return False
    spec_dir = (Path(config.rootpath) / "spec").resolve()
    return all(Path(a).resolve() in (spec_dir, Path(config.rootpath).resolve())
               for a in config.args)


# -- which functions a version owns -------------------------------------------------------------

def _functions(body, prefix=""):
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body, prefix + node.name + ".")


def _body_start(node) -> int:
    """Index of the first statement after the docstring; -1 for a body of `...` or a kernel."""
    if any("jit" in ast.unparse(d) for d in node.decorator_list):
        return -1
    body, start = node.body, 0
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        start = 1
    rest = body[start:]
    if not rest or (len(rest) == 1 and isinstance(rest[0], ast.Expr)
                    and isinstance(rest[0].value, ast.Constant) and rest[0].value.value is ...):
        return -1
    return start


def _owned(tree, rel: str):
    for qualname, node in _functions(tree.body):
        start = _body_start(node)
        if start >= 0:
            yield f"{rel}:{qualname}", node, start


def owned_functions(root: Path = ROOT) -> dict[str, list[str]]:
    """version -> ["file:Qualname", ...] of the functions it defines."""
    out = {}
    for version in implementations.version_names(root):
        out[version] = [key for path in sorted((root / version).rglob("*.py"))
                        for key, _, _ in _owned(ast.parse(path.read_text()),
                                                path.relative_to(root).as_posix())]
    return out


# -- the entry calls ------------------------------------------------------------------------------

class _Loader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):
        source = self.get_data(self.path)  # never the cached bytecode, never written back
        rel = Path(self.path).resolve().relative_to(ROOT).as_posix()
        tree = ast.parse(source, self.path)
        for key, node, start in _owned(tree, rel):
            first = node.body[start]
            call = ast.Expr(ast.Call(ast.Name(HOOK, ast.Load()), [ast.Constant(key)], []))
            node.body.insert(start, ast.copy_location(call, first))
        ast.fix_missing_locations(tree)
        return compile(tree, self.path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith("implementations.v"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            spec.loader = _Loader(fullname, spec.origin)
        return spec


class OwnedCoverage:
    def __init__(self, config):
        self.config = config
        self.context = ""
        self.entered: dict[str, set[str]] = {}   # version -> functions its specs entered
        self.missing: list[str] | None = None
        self.local = hasattr(config, "workerinput") or not getattr(
            config.option, "numprocesses", None)
        if self.local:  # this process runs tests
            loaded = [m for m in sys.modules if m.startswith("implementations.v")]
            assert not loaded, f"versions imported before the plugin could watch them: {loaded}"
            setattr(builtins, HOOK, self._record)
            sys.meta_path.insert(0, _Finder())

    def _record(self, key: str) -> None:
        self.entered.setdefault(self.context, set()).add(key)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        impl = impl_of(item)
        self.context = getattr(impl, "name", "")
        yield
        self.context = ""

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        self._merge(json.loads(node.workeroutput.get("owned_entered", "{}")))

    def _merge(self, entered):
        for version, keys in entered.items():
            self.entered.setdefault(version, set()).update(keys)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if hasattr(self.config, "workerinput"):
            self.config.workeroutput["owned_entered"] = json.dumps(
                {v: sorted(k) for v, k in self.entered.items()})
            return
        gpu = torch.cuda.is_available()
        self.missing = [key for version, keys in owned_functions().items() for key in keys
                        if key not in self.entered.get(version, ()) and key not in RANKS_ONLY
                        and (gpu or key not in GPU_ONLY)]
        if self.missing and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if self.missing is None:
            return
        if self.missing:
            terminalreporter.section("functions no spec of their version enters", red=True)
            for key in self.missing:
                terminalreporter.line(f"  {key}")
            terminalreporter.line(f"{len(self.missing)} function(s) that versions own are "
                                  f"entered by none of their specs: the run fails")
        else:
            total = sum(map(len, owned_functions().values()))
            terminalreporter.line(f"owned coverage: all {total} functions the versions own are "
                                  f"entered by their own versions' specs")
