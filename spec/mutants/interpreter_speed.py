"""Interpreter patching: the specs' Triton interpreter patches triton.language once a launch
(spec/support/speed/interpreter.py), not at every nested @triton.jit call, and computes what
the stock interpreter computes. Mutants of spec/support, run like harness mutants: the edited
module's install() is what spec/test_interpreter_speed.py puts on the stock interpreter."""
from spec.mutants import Edit, Mutant

SPEED = "spec/support/speed/interpreter.py"
PAGE = "spec/test_interpreter_speed.py"
ONCE = f"{PAGE}::test_a_launch_patches_the_language_as_often_for_one_tile_as_for_eight"
SKIP = "        if patched and mine and mine <= patched[-1]:\n"

MUTANTS = [
    Mutant("interpreter-patches-at-every-nested-call", "interpreter patching", (
        Edit(SPEED, SKIP, "        if False:\n"),), (ONCE,), (),
        "a nested call patches the language again, as the stock interpreter does: no saving"),
    Mutant("interpreter-skips-modules-the-launch-has-not-patched", "interpreter patching", (
        Edit(SPEED, SKIP, "        if patched and mine:\n"),), (ONCE,), (),
        "a nested call inside a launch never patches: triton.language.core, which tl.sum "
        "reads, is left as it is"),
    Mutant("interpreter-launches-unwatched", "interpreter patching", (
        Edit(SPEED, "    launch.__call__ = launched\n", ""),), (ONCE,), (),
        "install() wraps the nested patch but not the launch: no launch records what it "
        "patched, so every nested call patches again"),
]
