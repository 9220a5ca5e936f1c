"""v02's fused causal attention, the phase every later prefill reaches: one that builds the
scores again (the same numbers, so only the spec that watches tensor sizes notices), and one
whose mask after a cached prefix starts at the context's first key."""
from spec.mutants import Edit, Mutant

MODEL = "v02_kv_cache/model.py"
PAGE = "spec/test_v02_prefill_attention.py"
NO_SCORES = f"{PAGE}::test_a_prefill_of_t_tokens_creates_no_tensor_of_t_by_t_elements"
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
]
