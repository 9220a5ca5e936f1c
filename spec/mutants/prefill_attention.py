"""v02's fused causal attention, the phase every later prefill reaches: one that builds the
scores again (the same numbers, so only the spec that watches tensor sizes notices), and one
whose mask after a cached prefix starts at the context's first key; and v01_1's grouped phase
copying K and V per query head again, as v01_0 did (the same numbers, so only the spec that
watches what the phase makes notices)."""
from spec.mutants import Edit, Mutant

MODEL = "v02_kv_cache/model.py"
PAGE = "spec/test_v02_prefill_attention.py"
NO_SCORES = f"{PAGE}::test_a_prefill_of_t_tokens_creates_no_tensor_of_t_by_t_elements"
GROUPED = ("spec/test_v01_1_split_gqa.py::"
           "test_each_kv_head_is_read_in_place_by_its_group_never_copied_per_query_head")
SAME_AS_READING = f"{PAGE}::test_causal_attention_equals_v01_1s_phase_for_the_last_t_of_s_positions"

MUTANTS = [
    Mutant("v02-prefill-attention-builds-the-scores", "fusion", (
        Edit(MODEL, "        t, kv_heads, group, d = qg.shape\n        s = k.shape[0]\n",
             "        return super().causal_attention(qg, k, v)\n"
             "        t, kv_heads, group, d = qg.shape\n        s = k.shape[0]\n"),),
        (NO_SCORES,), ("v07",),
        "causal_attention falls back to v01_1's phase: every head's T x T scores, the same tokens"),
    Mutant("v02-prefix-attention-aligned-top-left", "fusion", (
        Edit(MODEL, ".tril(s - t)}", ".tril()}"),),
        (SAME_AS_READING,), ("v02",),
        "with a cached prefix the new rows' causal mask starts at the context's first key"),
    Mutant("v01-kv-heads-copied-per-query-head", "fusion", (
        Edit("v01_1_split_gqa/model.py",
             '        scores = torch.einsum("tkgd,skd->kgts", qg, k) * qg.shape[-1] ** -0.5\n',
             '        g = qg.shape[2]\n'
             '        k = k.repeat_interleave(g, 1).reshape(s, k.shape[1], g, -1)\n'
             '        v = v.repeat_interleave(g, 1).reshape(s, v.shape[1], g, -1)\n'
             '        scores = torch.einsum("tkgd,skgd->kgts", qg, k) * qg.shape[-1] ** -0.5\n'),
        Edit("v01_1_split_gqa/model.py",
             '        return torch.einsum("kgts,skd->tkgd", probs, v)\n',
             '        return torch.einsum("kgts,skgd->tkgd", probs, v)\n')),
        (GROUPED,), ("v01_1",),
        "the grouped attention copies each KV head per query head (v01_0's repeat_interleave)"),
]
