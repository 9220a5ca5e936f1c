"""The anchors of `torchlet bench anchors` compute what they claim (spec/test_bench_anchors.py):
the gpt-fast-style step decodes the oracle's tokens, the matmuls anchor runs that step's GEMMs,
and the floor counts the K/V a step reads. Harness mutants: they edit torchlet/bench/, each
leaving an anchor that still runs and still times something plausible."""
from spec.mutants import Edit, Mutant

STEP, FLOOR = "torchlet/bench/static_step.py", "torchlet/bench/floor.py"
SPEC = "spec/test_bench_anchors.py"
PARITY = f"{SPEC}::test_the_static_cache_step_decodes_hugging_faces_greedy_tokens"
PROPERTY = "anchors"

MUTANTS = [
    Mutant("anchor-mask-hides-the-new-token", PROPERTY, (
        Edit(STEP, "device=tokens.device) <= positions[..., None]",
             "device=tokens.device) < positions[..., None]"),),
        (PARITY,), (), "a query does not attend to the K/V of its own position"),
    Mutant("anchor-query-heads-on-the-wrong-kv-head", PROPERTY, (
        Edit(STEP, "q = q.view(b, t, nkv, group, hd).permute(0, 2, 3, 1, 4)",
             "q = q.view(b, t, group, nkv, hd).permute(0, 3, 2, 1, 4)"),),
        (PARITY,), (), "query head h reads K/V head h mod kv_heads, not h // group"),
    Mutant("anchor-matmuls-skip-the-lm-head", PROPERTY, (
        Edit(STEP, "            F.linear(x, self.lm_head)\n        return run",
             "        return run"),),
        (f"{SPEC}::test_the_matmuls_anchor_runs_exactly_the_static_steps_gemms",), (),
        "the matmuls anchor leaves out the step's largest GEMM"),
    Mutant("anchor-floor-reads-no-kv", PROPERTY, (
        Edit(FLOOR, "    return weight_bytes(config, dtype_bytes) + batch * context * "
                    "config.kv_bytes_per_token(dtype_bytes)",
             "    return weight_bytes(config, dtype_bytes)"),),
        (f"{SPEC}::test_bench_anchors_writes_a_row_per_cell_with_the_floor_counted_from_the_"
         "tensors",), (), "a step's floor counts the weights but not the K/V it reads"),
]
