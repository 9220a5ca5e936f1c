"""Meta: the specs' Triton interpreter patches the language once a launch, and computes the same.

What it checks: under TRITON_INTERPRET the specs run with spec/support/speed/interpreter.py
installed: a launch patches triton.language for the interpreter once, and a @triton.jit helper
(ours, or the standard library's tl.sum) called in a loop of the kernel patches nothing more,
however many times the loop runs; the kernel's result is the float64 reference's; and after the
launch triton.language's builtins are Triton's own again.
Why: the stock interpreter re-patches the language at every nested call (about 0.3 ms each), a
few percent of the suite's time. A change of what a kernel computes, or of the language left
behind after a launch, would be a harness bug every kernel spec stands on.
Core principle: the patch work is counted where Triton does it (its per-module patch function,
wrapped here), not read from the speed-up's own bookkeeping.
Files: spec/support/speed/interpreter.py, conftest.py (installs it).
Tradeoff left visible: it rests on Triton's private interpreter module; where that has another
shape, install() declines and the specs run at the stock interpreter's speed (the first spec
says so by failing here, not silently).
"""
import os

import pytest
import torch
import triton
import triton.language as tl

from spec.support.speed import interpreter as speed

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="the specs run Triton's interpreter only on a CPU")


@triton.jit
def _scaled(x, s):
    return x * s


@triton.jit
def _row_sums(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, TILES: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    total = 0.0
    for t in range(TILES):  # each tile calls a helper of ours and the standard library's tl.sum
        at = t * BLOCK + cols
        x = tl.load(x_ptr + row * n_cols + at, mask=at < n_cols, other=0.0)
        total += tl.sum(_scaled(x, 2.0), axis=0)
    tl.store(out_ptr + row, total)


def run(x, tiles):
    out = torch.empty(x.shape[0], dtype=x.dtype)
    _row_sums[(x.shape[0],)](x, out, x.shape[1], BLOCK=16, TILES=tiles)
    return out


def test_the_specs_run_with_the_interpreter_patched_once_a_launch():
    from triton.runtime import interpreter
    assert getattr(interpreter._patch_lang, "_torchlet", False), \
        "spec/support/speed/interpreter.py is not installed: Triton's interpreter changed shape?"


def patches_made(tiles):
    """The language modules and classes the interpreter patched during one launch of a kernel
    whose loop runs `tiles` times, counted where Triton patches each (_patch_builtin); and the
    launch's result checked against float64's."""
    from triton.runtime import interpreter
    patched = []
    builtin = interpreter._patch_builtin
    interpreter._patch_builtin = lambda pkg, *a: (patched.append(pkg), builtin(pkg, *a))[1]
    try:
        x = torch.randn(3, 16 * tiles, dtype=torch.float64)
        torch.testing.assert_close(run(x, tiles), 2.0 * x.sum(dim=1), rtol=1e-12, atol=1e-12)
    finally:
        interpreter._patch_builtin = builtin
    return patched


@pytest.fixture
def stock(monkeypatch):
    """Triton's interpreter as it comes, for the spec (the suite's wrappers back after it)."""
    from triton.runtime import interpreter as triton_interpreter
    launch = triton_interpreter.GridExecutor
    monkeypatch.setattr(triton_interpreter, "_patch_lang",
                        getattr(triton_interpreter._patch_lang, "_original",
                                triton_interpreter._patch_lang))
    monkeypatch.setattr(launch, "__call__", getattr(launch.__call__, "_original",
                                                    launch.__call__))


def test_a_launch_patches_the_language_as_often_for_one_tile_as_for_eight(stock):
    # The module's own install(), on the stock interpreter (what a mutant of it would change).
    assert speed.install()
    # The launch patches triton.language (tl, its tensor, math); the first tl.sum patches
    # triton.language.core, which the standard library reads (and, once the interpreter has
    # rewritten tl.sum, whose module then names triton.language too, that again). The loop
    # adds none. (A first launch, before the rewrite, patches less: left out.)
    patches_made(1)
    one, eight = patches_made(1), patches_made(8)
    assert tl in eight and tl.core in eight
    assert len(eight) == len(one), ([p.__name__ for p in one], [p.__name__ for p in eight])
    assert getattr(tl.load, "__triton_builtin__", False), \
        "triton.language's builtins were left patched after the launch"


def test_the_stock_interpreter_patches_at_every_nested_call_which_the_count_above_sees(stock):
    patches_made(1)
    one, eight = patches_made(1), patches_made(8)
    assert len(eight) > 3 * len(one)
