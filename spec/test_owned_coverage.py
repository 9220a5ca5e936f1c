"""Meta: the owned-coverage check sees what it claims to see.

What it checks: spec/support/checks/owned_coverage.py lists every function and method a version file
defines (kernels and `...` bodies aside), and the code it compiles calls the entry hook once per
call of each, before the body runs, with the line numbers of the file unchanged; and no
version memoizes a function with functools, whose later calls would never enter it.
Why: a check that missed a function, or recorded one that never ran, would pass a version
whose code no spec reaches, the thing it exists to stop.
Core principle: the loader's output is run here on a small source, and the hook's records are
compared with the calls made.
Files: spec/support/checks/owned_coverage.py.
Tradeoff left visible: the whole-suite verdict itself is only seen at the end of a whole run.
"""
import ast
import builtins
import traceback

from spec.support.checks import owned_coverage as oc

SOURCE = '''"""A module."""
import triton


def plain(x):
    """Doc."""
    return x + 1


class Part:
    def method(self):
        return 2

    def protocol(self):
        ...


@triton.jit
def kernel(x):
    pass


def fails():
    raise ValueError("line 23")
'''


def test_every_function_and_method_is_owned_but_kernels_and_ellipsis_bodies():
    keys = [key for key, _, _ in oc._owned(ast.parse(SOURCE), "v99_demo/m.py")]
    assert keys == ["v99_demo/m.py:plain", "v99_demo/m.py:Part.method", "v99_demo/m.py:fails"]


def test_the_compiled_code_records_each_call_and_keeps_the_files_line_numbers(tmp_path,
                                                                             monkeypatch):
    path = tmp_path / "m.py"
    no_triton = "import types\ntriton = types.SimpleNamespace(jit=lambda f: f)\n"
    path.write_text(SOURCE.replace("import triton\n", no_triton))
    monkeypatch.setattr(oc, "ROOT", tmp_path)
    seen = []
    monkeypatch.setattr(builtins, oc.HOOK, seen.append, raising=False)
    code = oc._Loader("m", str(path)).get_code("m")
    namespace = {}
    exec(code, namespace)
    assert seen == []
    namespace["plain"](1), namespace["Part"]().method(), namespace["plain"](2)
    assert seen == ["m.py:plain", "m.py:Part.method", "m.py:plain"]
    try:
        namespace["fails"]()
    except ValueError as e:
        line = traceback.extract_tb(e.__traceback__)[-1].lineno
    assert line == path.read_text().splitlines().index('    raise ValueError("line 23")') + 1


def test_no_function_a_version_owns_is_memoized_so_that_later_calls_skip_its_body():
    """The hook runs when a function's body starts. A function behind functools' caches is
    entered by its first call only, under whichever spec made it: whether its own version's
    specs enter it then depends on the order xdist ran the specs in, and a whole run failed
    on that once (v13's gemv asked its device's capability through a cached helper). A version
    memoizes in a dict its function reads, which enters the function every call."""
    cached = []
    for path in sorted(oc.ROOT.rglob("*.py")):
        for key, node, _ in oc._owned(ast.parse(path.read_text()),
                                      path.relative_to(oc.ROOT).as_posix()):
            names = [ast.unparse(d) for d in node.decorator_list]
            if any(n.split("(")[0].split(".")[-1] in ("lru_cache", "cache") for n in names):
                cached.append(f"{key} ({', '.join(names)})")
    assert not cached, "memoized functions the check sees entered once:\n  " + \
        "\n  ".join(cached)
