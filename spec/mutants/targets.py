"""The targets' verdicts on the benchmarks page (harness mutants: they edit
torchlet/bench/targets.py, and the section's heading lines in doc.py). Each judges a bar from
the wrong figure, or misstates the card the runs came from, which only a verdict or heading read
from known results shows."""
from spec.mutants import Edit, Mutant

TARGETS = "torchlet/bench/targets.py"
ISSUE_48 = ("spec/test_bench.py::test_issue_48s_targets_judge_one_call_kernels_v15s_itl_maximum_"
            "and_the_qwen3_workload")
PROPERTY = "targets"
DOC = "torchlet/bench/doc.py"
CARDS = ("spec/test_bench.py::test_the_targets_section_names_the_card_and_commit_of_every_run_it_"
         "reads")

MUTANTS = [
    Mutant("targets-itl-maximum-over-the-p50", PROPERTY, (
        Edit(TARGETS, 'row["itl_max_ms"] / row["itl_p99_ms"]',
             'row["itl_max_ms"] / row["itl_p50_ms"]'),),
        (ISSUE_48,), (), "v15's inter-token maximum is judged against its median, not its p99"),
    Mutant("targets-itl-of-the-first-version", PROPERTY, (
        Edit(TARGETS, 'if r.get("version", "").startswith("v15") and "itl_max_ms" in r)',
             'if "itl_max_ms" in r)'),),
        (ISSUE_48,), (), "the mixed bar judges whichever version comes first (v14), not v15"),
    Mutant("targets-one-call-judges-the-chain", PROPERTY, (
        Edit(TARGETS, 'out += [_judge(what, r["paged_pct_bound"], ONE_CALL_PCT_BOUND',
             'out += [_judge(what, r.get("paged_chain_pct_bound", 100.0), ONE_CALL_PCT_BOUND'),),
        (ISSUE_48,), (), "the one-call bar reads the chained figure (or passes without one)"),
    Mutant("targets-qwen3-first-version", PROPERTY, (
        Edit(TARGETS, '    row = _newest(result["rows"]) if _on_gpu(result) else None\n'
                      '    what = "nano-vllm workload on a Qwen3',
             '    row = result["rows"][0] if _on_gpu(result) else None\n'
             '    what = "nano-vllm workload on a Qwen3'),),
        (ISSUE_48,), (), "the Qwen3 bar judges the run's first version, not its newest"),
    Mutant("targets-h100-bandwidth-unsaid", PROPERTY, (
        Edit(DOC, '    if any("H100" in (env.get("gpu") or "") for env in envs.values()):',
             '    if False:'),),
        (CARDS,), (), "runs on an H100 are judged against the H200's bounds without a word of "
                      "what its memory allows"),
    Mutant("targets-h100-share-inverted", PROPERTY, (
        Edit(DOC, "        share = H100_RATED_BANDWIDTH / H200_BANDWIDTH",
             "        share = H200_BANDWIDTH / H100_RATED_BANDWIDTH"),),
        (CARDS,), (), "the H100's share of the bound is stated upside down"),
]
