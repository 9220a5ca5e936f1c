"""Token parity with Hugging Face: breakages of the decoder maths that the oracle specs catch."""
from spec.mutants import Edit, Mutant

PARITY = ("spec/test_v00_generation.py::test_greedy_tokens_equal_the_oracle",
          "spec/test_v00_generation.py::test_logits_stay_close_to_the_oracle_along_the_reference_path")
MODEL = "v00_full_recompute/model.py"
QWEN3 = "spec/test_v00_generation.py::test_a_qwen3_checkpoint_gives_the_oracles_tokens"

MUTANTS = [
    Mutant("v00-rms-norm-ignores-its-weight", "token parity", (
        Edit(MODEL, "return weight * x32.to(x.dtype)", "return x32.to(x.dtype)"),),
        PARITY, ("v00",), "RMSNorm drops its learned scale"),
    Mutant("v00-rope-interleaved-pairs", "token parity", (
        Edit(MODEL, "angles = torch.cat([angles, angles], dim=-1)",
             "angles = angles.repeat_interleave(2, dim=-1)"),),
        PARITY, ("v00",), "RoPE rotates adjacent pairs instead of HF's two halves"),
    Mutant("v00-qkv-bias-dropped", "token parity", (
        Edit(MODEL, 'return torch.nn.functional.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))',
             'return torch.nn.functional.linear(x, w[f"{name}.weight"])'),),
        PARITY, ("v00",), "Qwen2's q/k/v biases are ignored"),
    Mutant("v00-attention-scale-off", "token parity", (
        Edit(MODEL, 'scores = torch.einsum("qhd,khd->hqk", q, k) * q.shape[-1] ** -0.5',
             'scores = torch.einsum("qhd,khd->hqk", q, k) * q.shape[-1] ** -0.25'),),
        PARITY, ("v00",), "attention scores scaled by D^-1/4 instead of D^-1/2"),
    Mutant("v00-qwen3-k-norm-skipped", "token parity", (
        Edit(MODEL, '            norm(k, w["self_attn.k_norm.weight"], config.rms_eps))',
             "            k)"),),
        (QWEN3,), ("v00",), "Qwen3's k heads go to RoPE without their RMSNorm (k_norm)"),
]
