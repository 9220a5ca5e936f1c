"""Issue 30's bars for the newest version on the H200 (and the earlier issues' bars it keeps),
with issue 48's where it raised one or set a new one, judged from the recorded results: met, or
missed by how much, with where the time goes (device time against host time per step) and the
anchors measured in the same run."""
from __future__ import annotations

WORKLOAD_SECONDS = 2.0      # nano-vllm workload, wall time (the median of the call's runs)
WORKLOAD_MOONSHOT = 1.43    # ... issue 30's moonshot: half the physical floor's 0.715 s away
WORKLOAD_PCT_FLOOR = 35.0   # ... as a share of the physical floor
WORKLOAD_VS_HF = 89.0       # ... against HF generate's wall time in the same run
PREFILL_STEPS_SECONDS = 0.5  # ... the steps with prefill rows, summed
KERNEL_PCT_BOUND = 70.0     # paged decode attention at B=64, context 4096, % of bandwidth
BATCH1_STEP_MS = 0.75       # a batch-1 decode step with graph replay, context 128
BATCH256_STEP_MS = 2.0      # a decode step at batch 256, context 1024
QUANTIZED_VS_HF = 3.0  # issue 46: the default version reading quantized weights
MAIN_JOB_VS_HF = 1.5        # the CPU main job: the default version's tokens/s over HF generate's
LONG_PROMPT_VS_HF = 1.0     # a 5,000-token prompt on a CPU: HF's seconds to the first token
#                             over the default version's (issue 23)
KERNELS_PER_STEP = 120      # kernels a batch-1 decode step launches (issue 48; issue 30's: 300)
GPU_BUSY_PCT = 90.0         # GPU busy share of a decode step at batch 256, context 1024
# Issue 48's new bars.
ONE_CALL_PCT_BOUND = 80.0   # paged decode attention, one call a replay, at these cells:
ONE_CALL_CELLS = ((256, 1024), (64, 4096))
ITL_MAX_OVER_P99 = 2.0      # chunked prefill's (v15's) inter-token maximum over its p99, mixed
QWEN3_PCT_FLOOR = 75.0      # the workload on a Qwen3-0.6B-shaped model, share of its floor


def _on_gpu(result: dict | None) -> bool:
    return bool(result) and "gpu" in result.get("environment", {})


def _judge(what: str, measured: float, target: float, unit: str, at_most: bool) -> str:
    ok = measured <= target if at_most else measured >= target
    if ok:
        return f"- {what}: **met**, {measured:.3g}{unit} (target {'≤' if at_most else '≥'} {target:g}{unit})."
    gap = measured - target if at_most else target - measured
    by = f"{gap:.1f} percentage points" if unit == "%" else f"{gap:.3g}{unit}"
    return (f"- {what}: **missed** by {by}: {measured:.3g}{unit} against "
            f"{'≤' if at_most else '≥'} {target:g}{unit}.")


def _newest(rows: list[dict]) -> dict | None:
    ok = [r for r in rows if "error" not in r and not r.get("version", "").startswith("HF")]
    return max(ok, key=lambda r: r["version"]) if ok else None


def _split(row: dict) -> str:
    if row.get("gpu_ms_per_step") is None:
        return f"{row['ms_per_step']:.3f} ms/step (device time not measured)"
    return (f"{row['ms_per_step']:.3f} ms/step = {row['gpu_ms_per_step']:.3f} ms of kernels + "
            f"{row['host_ms_per_step']:.3f} ms with no kernel running")


def _anchored(row: dict, anchors: dict | None = None) -> list[str]:
    """The cell's anchors from the same run, where it timed them (`bench decode --anchors`), else
    from `bench anchors` at the same cell and commit (the same device call, as the docs run it)."""
    where = "in the same run"
    if row.get("matmuls_ms") is None:
        same = [a for a in (anchors or {}).get("rows", [])
                if (a.get("batch"), a.get("context")) == (row["batch"], row["context"])
                and a.get("matmuls_ms") is not None and _commit(anchors) == _commit(row)]
        if not same:
            return []
        row, where = same[-1], "by `bench anchors` at the same commit"
    return [f"  - Anchors {where}: matmuls alone {row['matmuls_ms']:.3f} ms, "
            f"gpt-fast-style static-cache step {row['static_ms']:.3f} ms, floor "
            f"{row['floor_ms']:.3f} ms."]


def _commit(result_or_row: dict) -> str | None:
    return result_or_row.get("_commit") or result_or_row.get("environment", {}).get("commit")


def workload_lines(result: dict | None, decode: dict | None) -> list[str]:
    row = _newest(result["rows"]) if _on_gpu(result) else None
    if row is None:
        return ["- nano-vllm workload ≤ 2.0 s and ≥ 35% of the floor: not measured on the GPU yet "
                "(`torchlet bench gpu-workload --hf-baseline`)."]
    out = [_judge("nano-vllm workload wall time", row["wall_s"], WORKLOAD_SECONDS, " s", True),
           _judge("nano-vllm workload wall time, moonshot", row["wall_s"], WORKLOAD_MOONSHOT,
                  " s", True),
           _judge("share of the physical floor", row["pct_floor"], WORKLOAD_PCT_FLOOR, "%", False)]
    if row.get("wall_s_runs"):
        out.insert(1, f"  - The median of {len(row['wall_s_runs'])} runs in one call: "
                      + ", ".join(f"{w:.2f}" for w in row["wall_s_runs"]) + " s.")
    if row.get("vs_hf") is not None:
        out.append(_judge("ratio to HF generate, same run", row["vs_hf"], WORKLOAD_VS_HF, "x",
                          False))
    else:
        out.append("- ratio to HF generate: not measured in this run (`--hf-baseline`).")
    if row.get("prefill_step_s") is not None:
        out.append(_judge("steps with prefill rows, within the workload", row["prefill_step_s"],
                          PREFILL_STEPS_SECONDS, " s", True))
    if row["wall_s"] > WORKLOAD_SECONDS and row.get("prefill_step_s") is not None:
        decode_steps = row["steps"] - row.get("prefill_steps", 0)
        out.append(f"  - Where the time goes: {row['prefill_step_s']:.2f} s in steps with prefill "
                   f"rows, {row['decode_step_s']:.2f} s in {decode_steps:,} pure decode steps "
                   f"({1e3 * row['decode_step_s'] / max(decode_steps, 1):.2f} ms each).")
        for d in (decode or {}).get("rows", []):
            if "error" not in d and d["version"] == row["version"] and d["context"] == 1024:
                out.append(f"  - Decode step at B={d['batch']}, context 1024: {_split(d)}.")
    return out


def kernel_lines(result: dict | None) -> list[str]:
    rows = [r for r in (result or {}).get("rows", []) if r["batch"] == 64 and r["context"] == 4096]
    if not _on_gpu(result) or not rows:
        return ["- Paged decode attention at B=64, context 4096 ≥ 70% of 4.3 TB/s: not measured on "
                "the GPU yet (`torchlet bench kernel`)."]
    r = rows[-1]
    if r.get("paged_chain_pct_bound") is None:
        return [_judge("paged decode attention at B=64, context 4096, % of bandwidth",
                       r["paged_pct_bound"], KERNEL_PCT_BOUND, "%", False),
                f"  - Torch SDPA on contiguous K/V of the same data: {r['sdpa_pct_bound']:.1f}% "
                f"({r['sdpa_gb_s']:,.0f} GB/s); the paged kernel reaches {r['ratio']:.2f}x its "
                f"speed (matching it is the next bar)."]
    return [_judge(f"paged decode attention at B=64, context 4096, % of bandwidth, "
                   f"{r['chain_calls']} calls to a graph", r["paged_chain_pct_bound"], KERNEL_PCT_BOUND, "%", False),
            f"  - Torch SDPA on contiguous K/V of the same data, timed the same way: "
            f"{r['sdpa_chain_pct_bound']:.1f}%.",
            f"  - One call a replay, L2 flushed before it (a graph launch's cost included): "
            f"{r['paged_pct_bound']:.1f}%, SDPA {r['sdpa_pct_bound']:.1f}%."]


def one_call_lines(result: dict | None) -> list[str]:
    """Issue 48: the paged kernel one call a replay (a graph launch's cost in it), at SDPA's
    level: 80% of the bound at each of its cells, SDPA's figure beside."""
    rows = {(r["batch"], r["context"]): r for r in (result or {}).get("rows", [])
            if "paged_pct_bound" in r}
    out = []
    for batch, context in ONE_CALL_CELLS:
        r = rows.get((batch, context))
        what = f"paged decode attention at B={batch}, context {context}, one call a replay"
        if not _on_gpu(result) or r is None:
            out.append(f"- {what} ≥ {ONE_CALL_PCT_BOUND:g}% of 4.3 TB/s: not measured on the GPU "
                       "yet (`torchlet bench kernel`).")
            continue
        out += [_judge(what, r["paged_pct_bound"], ONE_CALL_PCT_BOUND, "%", False),
                f"  - Torch SDPA on contiguous K/V, the same way: {r['sdpa_pct_bound']:.1f}% "
                f"(the paged kernel {r['ratio']:.2f}x its speed)."]
    return out


def mixed_lines(result: dict | None) -> list[str]:
    """Issue 48: under mixed traffic the chunked-prefill version's (v15's) largest gap between
    two tokens at most twice its p99."""
    row = next((r for r in (result or {}).get("rows", [])
                if r.get("version", "").startswith("v15") and "itl_max_ms" in r), None)
    what = "v15's inter-token maximum under mixed traffic, over its p99"
    if not _on_gpu(result) or row is None:
        return [f"- {what} ≤ {ITL_MAX_OVER_P99:g}x: not measured on the GPU yet "
                "(`torchlet bench mixed --versions v14,v15`)."]
    return [_judge(what, row["itl_max_ms"] / row["itl_p99_ms"], ITL_MAX_OVER_P99, "x", True),
            f"  - Maximum {row['itl_max_ms']:.2f} ms, p99 {row['itl_p99_ms']:.2f} ms, p50 "
            f"{row['itl_p50_ms']:.2f} ms."]


def qwen3_lines(result: dict | None) -> list[str]:
    """Issue 48: the workload on a Qwen3-0.6B-shaped model at 75% of its own floor."""
    row = _newest(result["rows"]) if _on_gpu(result) else None
    what = "nano-vllm workload on a Qwen3-0.6B-shaped model, share of its floor"
    if row is None:
        return [f"- {what} ≥ {QWEN3_PCT_FLOOR:g}%: not measured on the GPU yet (`torchlet bench "
                "gpu-workload --model-shape qwen3-0.6b`)."]
    return [_judge(what, row["pct_floor"], QWEN3_PCT_FLOOR, "%", False),
            f"  - {row['version']}: {row['wall_s']:.2f} s against a floor of "
            f"{result['floor']['seconds']:.3f} s."]


def decode_lines(result: dict | None, anchors: dict | None = None) -> list[str]:
    newest = _newest((result or {}).get("rows", []))
    commit = _commit(result or {})
    rows = [{**r, "_commit": commit} for r in (result or {}).get("rows", []) if "error" not in r
            and r["version"] == (newest or {}).get("version")]
    ones = [r for r in rows if r["batch"] == 1]
    if not _on_gpu(result) or not ones:
        return [f"- Batch-1 decode step with graph replay ≤ {BATCH1_STEP_MS:g} ms: not measured on the GPU yet "
                "(`torchlet bench decode`)."]
    r = min(ones, key=lambda x: x["context"])
    line = _judge(f"batch-1 decode step ({r['version']}, context {r['context']})",
                  r["ms_per_step"], BATCH1_STEP_MS, " ms", True)
    out = [line, f"  - {_split(r)}.", *_anchored(r, anchors)]
    if r.get("kernels_per_step") is not None:
        out.append(_judge("kernels per batch-1 decode step", r["kernels_per_step"],
                          KERNELS_PER_STEP, "", True))
    busy = [x for x in rows if x["batch"] == 256
            and x["context"] == 1024 and x.get("gpu_ms_per_step")]
    if busy:
        b = busy[-1]
        out.append(_judge("decode step at batch 256, context 1024", b["ms_per_step"],
                          BATCH256_STEP_MS, " ms", True))
        out.append(_judge("GPU busy share of a decode step at batch 256, context 1024",
                          100 * b["gpu_ms_per_step"] / b["ms_per_step"], GPU_BUSY_PCT, "%", False))
        out += [f"  - {_split(b)}.", *_anchored(b, anchors)]
    else:
        out.append("- GPU busy share at batch 256, context 1024: not in this decode run.")
    return out


def main_job_lines(result: dict) -> list[str]:
    """Issue 15's CPU target, judged from one main-job run at each of its thread counts: the
    default version's median tokens/s at least 1.5x HF generate's, with the same token ids;
    then llama.cpp's anchor rows, beside it and not judged."""
    job = result["workload"]
    rows = [r for r in result["rows"] if "error" not in r]
    counts = list(dict.fromkeys(r.get("threads") for r in rows)) or [None]
    out = []
    for count in counts:
        at = "" if len(counts) == 1 else f" at {count} thread{'' if count == 1 else 's'}"
        row = next((r for r in rows if r["version"] == job["default_version"]
                    and r.get("threads") == count), {})
        what = (f"The default version ({job['default_version']}) ≥ {MAIN_JOB_VS_HF:g}x HF "
                f"generate's tokens/s{at}")
        if row.get("vs_hf") is None:
            out.append(f"- {what}: not measured (a row failed).")
            continue
        line = _judge(what, row["vs_hf"], MAIN_JOB_VS_HF, "x", False)
        if not row.get("same_ids_as_hf"):
            line += " Its token ids differ from HF's, so it does not count."
        out.append(line)
        if "as stored" in row.get("mode", ""):  # issue 46: weights read as the file stores them
            out.append(_judge(f"The default version on the file's quantized weights ≥ "
                              f"{QUANTIZED_VS_HF:g}x HF generate's tokens/s{at}", row["vs_hf"],
                              QUANTIZED_VS_HF, "x", False))
        for anchor in (r for r in rows if r.get("anchor") and r.get("threads") == count):
            out.append(f"  - Anchor, not a target: {anchor['version']} on the same GGUF file "
                       f"({anchor['weights']} weights), n_threads {count}: "
                       f"{anchor['tok_s_median']:.1f} tokens/s, "
                       f"{anchor['tok_s_median'] / row['tok_s_median']:.2f}x the default "
                       f"version's.")
    return out


def long_prompt_lines(result: dict) -> list[str]:
    """Issue 23's CPU target: the default version's first token after a long prompt no slower
    than HF generate's, the same token."""
    job = result["workload"]
    row = next((r for r in result["rows"] if r.get("version") == job["default_version"]), {})
    what = (f"The default version's ({job['default_version']}) first token after "
            f"{job['prompt_tokens']:,} tokens no slower than HF generate's")
    if row.get("vs_hf") is None:
        return [f"- {what}: not measured (a row failed)."]
    line = _judge(what, row["vs_hf"], LONG_PROMPT_VS_HF, "x", False)
    if not row.get("same_ids_as_hf"):
        line += " Its first token differs from HF's, so it does not count."
    return [line]


def verdicts(results: dict[str, dict]) -> list[str]:
    return (workload_lines(results.get("gpu-workload"), results.get("decode"))
            + qwen3_lines(results.get("gpu-workload-qwen3"))
            + kernel_lines(results.get("kernel")) + one_call_lines(results.get("kernel"))
            + mixed_lines(results.get("mixed"))
            + decode_lines(results.get("decode"), results.get("anchors")))
