"""Meta: a version owns only its idea.

What it checks: the versions' code is not copied from one version into another (under 5% of the
code lines lie in runs of six or more lines that another version holds too, measured by
torchlet/duplication.py); no function a version owns has the body of a function an earlier
version owns, so no exercise stub asks a learner to write again what an earlier version taught;
and v06's exercise holds only v06's idea (8 stubs at most).
Why: a reader compares adjacent versions and a learner writes one version's functions; copies
make the diff longer than the idea and the exercise a retyping of the previous one.
Core principle: a version subclasses or composes its predecessor's parts and overrides only what
its idea changes; measured on the source, with the method written in torchlet/duplication.py.
Files: torchlet/duplication.py, torchlet/learner.py (the stubs), implementations/.
Tradeoff left visible: a one-line body shared by two versions (a property returning a field)
counts as a copy too; such a method belongs in the earlier version's part. Three model functions
are still copies by text (LATE_BOUND below): they run their own version's layers.
"""
import ast

import implementations
from torchlet import duplication, learner

ROOT = implementations.REFERENCE_ROOT


def test_under_five_percent_of_the_code_lines_are_copied_across_versions():
    copied, total, per_file = duplication.measure(ROOT)
    assert copied < 0.05 * total, (f"{copied} of {total} lines ({copied / total:.1%}) are copies; "
                                   f"most in {per_file.most_common(3)}")


def bodies(version: str) -> dict[str, str]:
    """`module.qualname` -> the dump of its body without the docstring."""
    out = {}
    for path in sorted((ROOT / version).rglob("*.py")):
        module = learner.module_name(ROOT / version, path)
        for qualname, node in learner.functions(ast.parse(path.read_text()).body):
            body = node.body[1:] if learner._docstring_node(node) else node.body
            out[f"{module}.{qualname}"] = ast.dump(ast.Module(body=body, type_ignores=[]))
    return out


# Model functions whose text equals a predecessor's but whose names resolve in their own module,
# so they run that version's layers (v01_1's decoder_layer calls v01_1's attention; v09's rope_qk
# and qkv_heads call v09's kernels). Importing the predecessor's would run the old layers; they
# go once the model functions take their layers as a part (issue 11, not done yet).
LATE_BOUND = {"v01_1_split_gqa:model.decoder_layer", "v09_triton_basics:model.rope_qk",
              "v09_triton_basics:model.qkv_heads"}


def test_no_function_a_version_owns_repeats_the_body_of_an_earlier_versions_function():
    seen: dict[str, str] = {}  # body -> where it first stands
    copies = []
    for version in implementations.version_names():
        for name, body in bodies(version).items():
            if body in seen and not seen[body].startswith(version + ":"):
                copies.append(f"{version}:{name}")
            seen.setdefault(body, f"{version}:{name}")
    unexpected = sorted(set(copies) - LATE_BOUND)
    assert not unexpected, f"{len(unexpected)} copied functions:\n  " + "\n  ".join(unexpected)
    assert LATE_BOUND <= set(copies), f"no longer copies, drop them here: {LATE_BOUND - set(copies)}"


def test_v06s_exercise_holds_only_the_static_buffers_idea(tmp_path):
    exercise = learner.make_exercise("v06_static_buffers", tmp_path / "tree")
    assert len(exercise.stubbed) <= 8, exercise.stubbed
