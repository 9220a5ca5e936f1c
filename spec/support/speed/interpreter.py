"""Triton's interpreter, made to stop re-patching triton.language at every nested call.

Under TRITON_INTERPRET a launch patches triton.language's builtins (tl.load, tl.dot, ...) for
the interpreter, runs the kernel's programs, then puts them back. A @triton.jit function a kernel
calls does the same patch again at every call, and so do the standard library's (tl.sum,
tl.max, tl.cdiv are @triton.jit functions): about 0.3 ms each time (inspect.getmembers over
the language modules), a kernel's tile loop calling several a tile. The patch a nested call
makes is the one its launch already made, unless the function's module holds a language
module the launch has not patched yet (triton.language.core, which the standard library
imports). So, for the specs only: within a launch, a nested call patches the modules the launch
has not patched, and skips the rest. What a kernel computes is unchanged (every kernel spec
checks it); measured, about 4% of the suite's CPU (py-spy over a whole run).

Private Triton API (triton 3.9's): installed only where it has the shape this code reads;
elsewhere the interpreter runs as it comes.
"""
from __future__ import annotations

import inspect


class _Nothing:
    """The scope of a patch not made: nothing to put back."""

    def restore(self) -> None:
        pass


def install() -> bool:
    """Wrap the interpreter's patch and launch; False where it has not the expected shape."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    patch, launch = getattr(interpreter, "_patch_lang", None), getattr(
        interpreter, "GridExecutor", None)
    if patch is None or launch is None or getattr(patch, "_torchlet", False) \
            or list(inspect.signature(patch).parameters) != ["fn"]:
        return False
    languages = (tl, tl.core)
    patched: list[set[int]] = []  # per running launch: the language modules it has patched

    def lang_patch(fn):
        mine = {id(v) for v in fn.__globals__.values()
                if inspect.ismodule(v) and any(v is lang for lang in languages)}
        if patched and mine and mine <= patched[-1]:
            return _Nothing()
        scope = patch(fn)
        if patched:
            patched[-1] |= mine
        return scope

    lang_patch._torchlet = True
    lang_patch._original = patch  # for the spec that counts the stock interpreter's work
    run = launch.__call__

    def launched(self, *args, **kwargs):
        patched.append(set())
        try:
            return run(self, *args, **kwargs)
        finally:
            patched.pop()

    launched._original = run
    interpreter._patch_lang = lang_patch
    launch.__call__ = launched
    return True
