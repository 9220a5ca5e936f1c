"""The rotation once per pass: from v05 a pass computes RoPE's cos and sin at its first layer and
every later layer reads them. The first mutant keeps every token right and recomputes them in each
layer, so only the spec that counts the step's aten ops notices; the others turn by wrong angles."""
from spec.mutants import Edit, Mutant

MODEL = "v05_decode_lanes/model.py"
ONCE = ("spec/test_v05_decode_lanes.py::test_a_pass_computes_the_rotations_cos_and_sin_once_for_"
        "all_its_layers")

MUTANTS = [
    Mutant("v05-rotation-per-layer", "rotation once per pass", (
        Edit(MODEL, "        if self._pass_values is None:\n            return compute()",
             "        return compute()"),),
        (ONCE,), ("v05",), "every layer computes cos and sin again, as v02 did"),
    Mutant("v06-rotation-kept-across-passes", "rotation once per pass", (
        Edit(MODEL, "        outer, self._pass_values = self._pass_values, {}",
             "        outer = self._pass_values = ({} if self._pass_values is None\n"
             "                                     else self._pass_values)"),),
        ("spec/test_v06_static_buffers.py::test_decode_logits_equal_v05s_step_after_step",),
        ("v06",),
        "the angles outlive their pass: a positions buffer refilled in place keeps its old ones"),
    Mutant("v09-rotation-one-position-off", "rotation once per pass", (
        Edit("v09_triton_basics/kernels.py",
             "    angles = positions[:, None] * inv_freq[None, :]\n"
             "    return angles.cos().contiguous(), angles.sin().contiguous()",
             "    angles = (positions + 1)[:, None] * inv_freq[None, :]\n"
             "    return angles.cos().contiguous(), angles.sin().contiguous()"),),
        ("spec/test_v09_triton_kernels.py",), ("v09",),
        "the kernel's angles are those of the next position"),
]
