"""Quantized weights (v18): the integers and scales the quantizer makes, how they are packed and
stacked, and where the products read them. Each mutant keeps the engine running and breaks the
numbers or the bytes, in a way the page's specs (the spec's own quantizer, bit for bit; a float64
engine on the dequantized weights; the storages a decode step reads) notice; the last keeps the
numbers and loses the CPU's speed. The C++ kernels' own breakages are checked by
spec/test_v18_cpu_kernels.py by hand (a mutant of them would rebuild the extension, about 15 s,
for every run of the set, and a process holds the ops it loaded first): the mutants of the layers'
ops below break the Python that calls them; the Triton gemv's run here under the interpreter."""
from spec.mutants import Edit, Mutant

QUANTIZE = "v18_quantized_weights/quantize.py"
MODEL = "v18_quantized_weights/model.py"
PAGE = "spec/test_v18_quantized_weights.py"
OWN = f"{PAGE}::test_the_engines_own_quantizer_makes_the_issues_integers"
LOGITS = f"{PAGE}::test_logits_are_a_float64_engine_on_the_dequantized_weights"
BYTES = f"{PAGE}::test_a_decode_step_reads_a_fraction_of_the_float_bytes"

GPU = "v18_quantized_weights/gpu_kernels.py"
TRITON = ("spec/test_v18_triton_kernels.py::test_both_kernels_equal_the_float64_product_of_the_"
          "dequantized_weights")

PROPERTY = "quantized weights"
V18 = ("v18",)

MUTANTS = [
    Mutant("v18-int8-scale-per-tensor", PROPERTY, (
        Edit(QUANTIZE, "    amax = w.abs().amax(dim=1, keepdim=True)\n",
             "    amax = w.abs().amax().expand(rows, 1)\n"),),
        (OWN,), V18, "one int8 scale for the whole matrix: a row of small weights keeps few "
                     "levels"),
    Mutant("v18-int4-minimum-of-the-next-group", PROPERTY, (
        Edit(QUANTIZE, "    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)\n",
             "    lo, hi = g.amin(-1, keepdim=True).roll(-1, dims=1), g.amax(-1, keepdim=True)\n"),),
        (OWN,), V18, "a group's minimum taken from the group after it (a group index off by one)"),
    Mutant("v18-int4-minimum-added", PROPERTY, (
        Edit(QUANTIZE, "q = torch.round((g - mins.float()[..., None])",
             "q = torch.round((g + mins.float()[..., None])"),),
        (OWN,), V18, "the minimum (the zero point's value) with the wrong sign"),
    Mutant("v18-int4-range-grid-only", PROPERTY, (
        Edit(QUANTIZE, "STEP_COUNTS = [14.0, 14.5, 15.0, 15.5, 16.0]\nREFITS = 2\n",
             "STEP_COUNTS = []\nREFITS = 0\n"),),
        (OWN,), V18, "int4's (scale, min) the group's range alone, no least-squares fit"),
    Mutant("v18-int4-nibbles-swapped", PROPERTY, (
        Edit(QUANTIZE, "    return (runs[:, :, 0] | (runs[:, :, 1] << 4)).reshape(rows, cols // 2)\n",
             "    return (runs[:, :, 1] | (runs[:, :, 0] << 4)).reshape(rows, cols // 2)\n"),),
        (OWN,), V18, "a run's first 16 columns packed into the high nibbles"),
    Mutant("v18-stack-in-another-order", PROPERTY, (
        Edit(MODEL, "[mine.pop(f\"{p}.weight\") for p in parts]",
             "[mine.pop(f\"{p}.weight\") for p in reversed(parts)]"),),
        (LOGITS,), V18, "q/k/v (and gate/up) stacked in the reverse order of v13's float stacks"),
    Mutant("v18-embedding-rows-of-token-zero", PROPERTY, (
        Edit(MODEL, "return self.table.select_rows(token_ids).dequantize()",
             "return self.table.select_rows(token_ids * 0).dequantize()"),),
        (LOGITS,), V18, "the quantized embedding looks up one row for every token"),
    Mutant("v18-lm-head-dequantized-each-step", PROPERTY, (
        Edit(MODEL, "            return self.project(hidden, weights.lm_head)\n",
             "            return hidden @ weights.lm_head.dequantize().to(hidden.dtype).T\n"),),
        (BYTES,), V18, "the LM head made float for every product: a step reads it as float32"),
    Mutant("v18-gemv-nibbles-swapped", PROPERTY, (
        Edit(GPU, "qa = ((b & 0xF) | MAGIC)", "qa = ((b >> 4) | MAGIC)"),
        Edit(GPU, "qb = ((b >> 4) | MAGIC)", "qb = ((b & 0xF) | MAGIC)"),),
        (TRITON,), V18, "the Triton gemv reads a run's high nibbles as its first 16 columns"),
    Mutant("v18-gemv-group-off-by-one", PROPERTY, (
        Edit(GPU, "gidx = rows[:, None] * n_groups + sub[None, :] // GROUP ",
             "gidx = rows[:, None] * n_groups + (sub[None, :] // GROUP + 1) % n_groups "),),
        (TRITON,), V18, "the Triton gemv scales each slice by the next group's scale"),
    Mutant("v18-gemv-zero-point-added", PROPERTY, (
        Edit(GPU, "off = base + tl.load(z_ptr + gidx", "off = base - tl.load(z_ptr + gidx"),),
        (TRITON,), V18, "the Triton gemv adds a group's zero point where it subtracts it"),
]

# The layers' C++ ops (csrc/layers.cpp, csrc/attention.cpp) are registered once per process, so a
# mutant's copy runs the reference's compiled code: these break the Python side each op is
# called through (cpu_kernels.py) or chosen by (model.py), as a slip there would.
CPU = "v18_quantized_weights/cpu_kernels.py"
OPS = "spec/test_v18_cpu_kernels.py"
MUTANTS += [
    Mutant("v18-cpu-norm-weight-left-out", PROPERTY, (
        Edit(CPU, "torch.ops.torchlet_q.add_rms_norm(x, residual, weight, eps)",
             "torch.ops.torchlet_q.add_rms_norm(x, residual, torch.ones_like(weight), eps)"),),
        (f"{OPS}::test_rms_norm_and_its_residual_add_equal_the_float64_norm",), V18,
        "the residual add's norm scales by ones, not its weight"),
    Mutant("v18-cpu-rope-cos-and-sin-swapped", PROPERTY, (
        Edit(CPU, "torch.ops.torchlet_q.rope_split(qkv, cos, sin,",
             "torch.ops.torchlet_q.rope_split(qkv, sin, cos,"),),
        (f"{OPS}::test_rope_split_turns_q_and_k_as_the_float64_rotation_and_keeps_v",), V18,
        "RoPE handed sin for cos"),
    Mutant("v18-cpu-store-k-and-v-swapped", PROPERTY, (
        Edit(CPU, "torch.ops.torchlet_q.store_kv(k, v, k_cache, v_cache, slot_mapping)",
             "torch.ops.torchlet_q.store_kv(v, k, k_cache, v_cache, slot_mapping)"),),
        (f"{OPS}::test_store_kv_writes_each_row_to_its_slot_and_nothing_for_minus_one",), V18,
        "each new key stored in the value cache and each value in the key cache"),
    Mutant("v18-cpu-attention-misses-the-newest-token", PROPERTY, (
        Edit(CPU, "block_tables,\n                                                       context_lens, scale)",
             "block_tables,\n                                                       context_lens - 1, scale)"),),
        (f"{OPS}::test_paged_decode_attention_equals_the_float64_attention_over_each_requests_"
         f"blocks",), V18, "the decode attention reads one token fewer than the context"),
    Mutant("v18-cpu-layers-never-chosen", PROPERTY, (
        Edit(MODEL, "ops.cpu_layers = not ops.on_triton and cpu_kernels.takes(device, dtype)",
             "ops.cpu_layers = False and cpu_kernels.takes(device, dtype)"),),
        (f"{OPS}::test_a_quantized_engine_on_a_cpu_runs_its_decode_step_on_these_ops",), V18,
        "a CPU engine keeps v17's PyTorch layers: the same numbers, 1.6x slower"),
]
