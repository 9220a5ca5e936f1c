"""Fusion (v13): fewer, larger kernels, the same numbers. The first mutant undoes a fusion and
keeps every number right, so only the spec that reads the dispatched matrix products notices; the
others compute something else in a fused kernel or call."""
from spec.mutants import Edit, Mutant

MODEL = "v13_fused/model.py"
KERNELS = "v13_fused/fused_kernels.py"
PAGE = "spec/test_v13_fused.py"
GEMMS = f"{PAGE}::test_a_decode_pass_multiplies_by_four_matrices_a_layer_where_v12_multiplied_by_seven"
SAME = f"{PAGE}::test_the_packed_path_gives_v12s_logits_and_tokens_with_and_without_a_cached_prefix"
ROPE = f"{PAGE}::test_rope_split_turns_q_and_k_like_the_reference_and_copies_v"
SWIGLU = f"{PAGE}::test_swiglu_packed_is_silu_of_the_first_half_times_the_second"

MUTANTS = [
    Mutant("v13-gate-and-up-left-apart", "fusion", (
        Edit(MODEL, '''          GATE_UP: ("mlp.gate_proj", "mlp.up_proj")}''', "}"),),
        (GEMMS,), ("v13",), "gate and up stay two matrices: two GEMMs a layer, the same tokens"),
    Mutant("v13-gate-and-up-stacked-the-wrong-way", "fusion", (
        Edit(MODEL, '''GATE_UP: ("mlp.gate_proj", "mlp.up_proj")''',
             '''GATE_UP: ("mlp.up_proj", "mlp.gate_proj")'''),),
        (SAME,), ("v13",), "the packed matrix is [up | gate]: SwiGLU takes silu of up"),
    Mutant("v13-prefix-attention-aligned-top-left", "fusion", (
        Edit(MODEL, "        if s == t:\n            mask = {\"is_causal\": True}",
             "        if True:\n            mask = {\"is_causal\": True}"),),
        (SAME,), ("v13",),
        "with a cached prefix the new rows' causal mask starts at the context's first key"),
    Mutant("v13-rope-split-turns-v-too", "fusion", (
        Edit(KERNELS, "    turned = (heads < n_q + n_kv)[:, None]",
             "    turned = (heads < n_q + 2 * n_kv)[:, None]"),),
        (ROPE,), ("v13",), "the fused RoPE kernel rotates the v heads as well"),
    Mutant("v13-swiglu-packed-reads-gate-as-up", "fusion", (
        Edit(KERNELS, "    up = tl.load(gate_up_ptr + row * 2 * width + width + col, mask=mask, other=0.0)",
             "    up = tl.load(gate_up_ptr + row * 2 * width + col, mask=mask, other=0.0)"),),
        (SWIGLU,), ("v13",), "swiglu_packed multiplies silu(gate) by gate"),
]
