"""What a benchmark leaves behind: a printed table, a JSON file and a PNG chart per kind of run.

Every figure in docs/benchmarks.md is read from these JSON files by doc.py; each file records
the command that produced it.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path


def _num(fmt):
    return lambda v: "n/a" if v is None else format(v, fmt)


def _split(row):
    if row.get("prefill_tokens") is None:
        return "n/a"
    return f"{row['prefill_tokens']} / {row['decode_tokens']}"


# (header, how to read a cell from a row)
WORKLOAD_COLUMNS = [
    ("version", lambda r: r["version"]),
    ("mode", lambda r: r.get("mode", "") + (", Triton kernels off" if r.get("kernels_off")
                                             else "")),
    ("wall s", lambda r: _num(".2f")(r.get("wall_s"))),
    ("CPU s", lambda r: _num(".2f")(r.get("cpu_s"))),
    ("output tok/s", lambda r: _num(",.1f")(r.get("output_tok_s"))),
    ("total tok/s", lambda r: _num(",.1f")(r.get("total_tok_s"))),
    ("TTFT ms (mean)", lambda r: _num(",.1f")(r.get("ttft_mean_ms"))),
    ("TPOT ms (mean)", lambda r: _num(",.2f")(r.get("tpot_mean_ms"))),
    ("peak MB", lambda r: _num(",.0f")(r.get("peak_memory_mb"))),
    ("steps", lambda r: _num(",d")(r.get("steps"))),
    ("prefill / decode tokens", _split),
]
GPU_EXTRA = [
    ("% of floor", lambda r: _num(".1f")(r.get("pct_floor"))),
    ("x HF generate", lambda r: _num(".1f")(r.get("vs_hf"))),
]
DECODE_COLUMNS = [
    ("version", lambda r: r["version"]),
    ("batch", lambda r: str(r["batch"])),
    ("context", lambda r: str(r["context"])),
    ("ms/step", lambda r: _num(".3f")(r.get("ms_per_step"))),
    ("GPU ms/step", lambda r: _num(".3f")(r.get("gpu_ms_per_step"))),
    ("kernels/step", lambda r: _num(",.0f")(r.get("kernels_per_step"))),
    ("MB/step", lambda r: _num(",.1f")(r.get("bytes_per_step") and r["bytes_per_step"] / 1e6)),
    ("GB/s", lambda r: _num(",.1f")(r.get("gb_s"))),
    ("% of bound", lambda r: _num(".1f")(r.get("pct_bound"))),
]
ANCHORS_COLUMNS = [
    ("batch", lambda r: str(r["batch"])),
    ("context", lambda r: str(r["context"])),
    ("matmuls alone ms", lambda r: _num(".3f")(r.get("matmuls_ms"))),
    ("their GPU ms", lambda r: _num(".3f")(r.get("matmuls_gpu_ms"))),
    ("GEMMs", lambda r: _num("d")(r.get("gemms_per_step"))),
    ("static-cache step ms", lambda r: _num(".3f")(r.get("static_ms"))),
    ("its GPU ms", lambda r: _num(".3f")(r.get("static_gpu_ms"))),
    ("its kernels", lambda r: _num(",.0f")(r.get("static_kernels"))),
    ("timed", lambda r: r.get("static_timed", "") + (" (see note)" if r.get("static_note")
                                                     else "")),
    ("floor ms", lambda r: _num(".3f")(r.get("floor_ms"))),
]
# Beside a decode row, when the run timed its cell's anchors (`bench decode --anchors`).
DECODE_ANCHOR_COLUMNS = [
    ("matmuls alone ms", lambda r: "failed" if "anchors_error" in r
     else _num(".3f")(r.get("matmuls_ms"))),
    ("static-cache step ms", lambda r: _num(".3f")(r.get("static_ms"))),
    ("floor ms", lambda r: _num(".3f")(r.get("floor_ms"))),
]
KERNEL_COLUMNS = [
    ("batch", lambda r: str(r["batch"])),
    ("context", lambda r: str(r["context"])),
    ("timed", lambda r: r.get("timing", "eager")),
    ("paged ms", lambda r: _num(".4f")(r.get("paged_ms"))),
    ("SDPA ms", lambda r: _num(".4f")(r.get("sdpa_ms"))),
    ("paged GB/s", lambda r: _num(",.1f")(r.get("paged_gb_s"))),
    ("SDPA GB/s", lambda r: _num(",.1f")(r.get("sdpa_gb_s"))),
    ("paged / SDPA", lambda r: _num(".2f")(r.get("ratio"))),
    ("paged % of bound", lambda r: _num(".1f")(r.get("paged_pct_bound"))),
    ("paged % in a chain", lambda r: _num(".1f")(r.get("paged_chain_pct_bound"))),
    ("SDPA % in a chain", lambda r: _num(".1f")(r.get("sdpa_chain_pct_bound"))),
    ("max abs diff", lambda r: _num(".1e")(r.get("max_abs_diff"))),
]


def _parity(row):
    if row.get("same_ids_as_hf") is None:
        same = "(HF)" if row["version"].startswith("HF") else "n/a"
    else:
        same = "yes" if row["same_ids_as_hf"] else f"NO, from token {row['first_difference']}"
    if row.get("anchor"):  # other weights than HF's: reported, not required
        same = f"not required ({row['weights']} weights): " + same.lower()
    return same if row.get("repeatable", True) else same + "; rounds differ"


MAIN_JOB_COLUMNS = [
    ("version", lambda r: r["version"]),
    ("threads", lambda r: str(r.get("threads", "n/a"))),
    ("mode", lambda r: r.get("mode", "")),
    ("tok/s (median)", lambda r: _num(".1f")(r.get("tok_s_median"))),
    ("min / max", lambda r: f"{r['tok_s_min']:.1f} / {r['tok_s_max']:.1f}"),
    ("first token ms (median)", lambda r: _num(",.1f")(r.get("first_token_ms_median"))),
    ("x HF (medians)", lambda r: _num(".2f")(r.get("vs_hf"))),
    ("same token ids as HF", _parity),
]
LONG_PROMPT_COLUMNS = [
    ("version", lambda r: r["version"]),
    ("mode", lambda r: r.get("mode", "")),
    ("first token s (median)", lambda r: _num(",.2f")(r.get("first_token_s_median"))),
    ("min / max", lambda r: f"{min(r['first_token_ms']) / 1e3:,.2f} / "
                            f"{max(r['first_token_ms']) / 1e3:,.2f}"),
    ("prompt tok/s", lambda r: _num(",.1f")(r.get("prefill_tok_s"))),
    ("x HF (medians)", lambda r: _num(".2f")(r.get("vs_hf"))),
    ("CPU s (median)", lambda r: _num(",.2f")(r.get("cpu_s_median"))),
    ("same first token as HF", _parity),
]
MIXED_COLUMNS = [
    ("version", lambda r: r["version"]),
    ("max_step_tokens", lambda r: _num(",d")(r.get("budget"))),
    ("ITL p50 ms", lambda r: _num(",.2f")(r.get("itl_p50_ms"))),
    ("ITL p99 ms", lambda r: _num(",.2f")(r.get("itl_p99_ms"))),
    ("ITL max ms", lambda r: _num(",.2f")(r.get("itl_max_ms"))),
    ("long prompts' TTFT p50 ms", lambda r: _num(",.1f")(r.get("ttft_p50_ms"))),
    ("TTFT p99 ms", lambda r: _num(",.1f")(r.get("ttft_p99_ms"))),
    ("steps", lambda r: _num(",d")(r.get("steps"))),
]
TP_COLUMNS = [
    ("TP", lambda r: str(r["tensor_parallel"])),
    ("rank", lambda r: str(r["rank"])),
    ("weights MiB", lambda r: _num(",.2f")(r.get("weights_mib"))),
    ("K/V MiB", lambda r: _num(",.2f")(r.get("kv_mib"))),
    ("peak MiB", lambda r: _num(",.0f")(r.get("peak_mib"))),
    ("weight-read floor ms", lambda r: _num(",.2f")(r.get("floor_ms"))),
]
TP_STEP_COLUMNS = [
    ("batch", lambda r: _num("d")(r.get("batch"))),
    ("decode step ms (rank 0)", lambda r: _num(",.2f")(r.get("step_ms"))),
    ("decode tok/s", lambda r: _num(",.1f")(r.get("decode_tok_s"))),
]
TP_WORKLOAD_COLUMNS = [
    ("wall s", lambda r: _num(".2f")(r.get("wall_s"))),
    ("output tok/s", lambda r: _num(",.1f")(r.get("output_tok_s"))),
]
SERVE_COLUMNS = [
    ("version", lambda r: r["version"]),
    ("rate req/s", lambda r: f"{r['rate']:g}"),
    ("output tok/s", lambda r: _num(",.1f")(r["output_tok_s"])),
    ("TTFT p50 ms", lambda r: _num(",.1f")(r["ttft_p50_ms"])),
    ("TTFT p99 ms", lambda r: _num(",.1f")(r["ttft_p99_ms"])),
    ("ITL p50 ms", lambda r: _num(",.2f")(r["itl_p50_ms"])),
    ("ITL p99 ms", lambda r: _num(",.2f")(r["itl_p99_ms"])),
]
BATCHING_COLUMNS = [
    ("version", lambda r: r["version"]),
    ("requests", lambda r: str(r["requests"])),
    ("tokens each", lambda r: str(r["tokens"])),
    ("one after another s", lambda r: _num(".2f")(r["sequential_s"])),
    ("all at once s", lambda r: _num(".2f")(r["concurrent_s"])),
    ("at once / after another", lambda r: _num(".3f")(r["ratio"])),
    ("same answers", lambda r: "yes" if r["same_answers"] else "NO"),
]
SPECULATIVE_COLUMNS = [
    ("workload", lambda r: r["workload"]),
    ("batch", lambda r: str(r["batch"])),
    ("k", lambda r: str(r["k"])),
    ("acceptance", lambda r: r["acceptance"] or "-"),
    # results from before --proposers had no column: their k > 0 rows were ngram's
    ("proposer", lambda r: r.get("proposer", "ngram" if r["k"] else None) or "-"),
    ("tok/s", lambda r: _num(",.1f")(r["output_tok_s"])),
    ("x k=0", lambda r: _num(".2f")(r["speedup"])),
    ("tokens / verify pass", lambda r: _num(".2f")(r["tokens_per_pass"])),
    ("acceptance rate", lambda r: "n/a" if r["acceptance_rate"] is None
     else f"{r['acceptance_rate']:.1%}"),
    ("tokens equal to k=0's", lambda r: f"{r['same_as_k0']} / {r['of_k0']}"),
]


def _medians(row: dict) -> str:
    """The two runs' median steps, where the run recorded them (not before 2026-12-05)."""
    if "none_step_ms_median" not in row:
        return "n/a"
    return f"{row['none_step_ms_median']:,.2f} / {row['json_step_ms_median']:,.2f}"


STRUCTURED_COLUMNS = [
    ("batch", lambda r: str(r["batch"])),
    ("decode step, none (ms)", lambda r: _num(",.2f")(r["none_step_ms"])),
    ("decode step, JSON schema (ms)", lambda r: _num(",.2f")(r["json_step_ms"])),
    ("x none", lambda r: _num(".2f")(r["ratio"])),
    ("medians, none / schema (ms)", _medians),
    ("answers that validate", lambda r: f"{r['valid']} / {r['answers']}"),
]
COLUMNS = {"batching": BATCHING_COLUMNS, "structured": STRUCTURED_COLUMNS,
           "speculative": SPECULATIVE_COLUMNS, "tp": TP_COLUMNS, "serve": SERVE_COLUMNS,
           "main-job": MAIN_JOB_COLUMNS, "mixed": MIXED_COLUMNS,
           "long-prompt": LONG_PROMPT_COLUMNS, "cpu": WORKLOAD_COLUMNS,
           "gpu-workload": WORKLOAD_COLUMNS + GPU_EXTRA, "decode": DECODE_COLUMNS,
           "kernel": KERNEL_COLUMNS, "anchors": ANCHORS_COLUMNS}
# A kind that is another bench's run on other hardware or weights: a section of its own on the
# page, the table and chart of the kind it varies.
VARIANT_OF = {"mixed-cpu": "mixed", "serve-gpu": "serve", "structured-gpu": "structured",
              "speculative-gpu": "speculative", "speculative-gpu-invariant": "speculative",
              "decode-quantized": "decode", "gpu-workload-quantized": "gpu-workload",
              "gpu-workload-qwen3": "gpu-workload"}


def base_kind(kind: str) -> str:
    """The kind whose table and chart `kind` shares (itself, unless it is a variant)."""
    return VARIANT_OF.get(kind, kind)


def _hits(row):
    if row.get("prefix_queried_tokens") is None:
        return "n/a"
    return f"{row['prefix_hit_tokens']:,} / {row['prefix_queried_tokens']:,}"


# Shown only when some row has a prefix cache: most tables have none, and a column of n/a
# would say nothing.
PREFIX_COLUMNS = [
    ("prefix hit rate", lambda r: "n/a" if r.get("prefix_hit_rate") is None
     else f"{r['prefix_hit_rate']:.1%}"),
    ("prefix hit / queried tokens", _hits),
]


# Shown only when a version ran more than once (`bench gpu-workload --repeats`).
RUNS_COLUMN = ("wall s of each run", lambda r: ", ".join(f"{w:.2f}" for w in r["wall_s_runs"])
               if r.get("wall_s_runs") else "")


def columns(kind: str, rows: list[dict]) -> list:
    kind = base_kind(kind)
    if kind == "tp":  # a workload's run, or decode steps timed
        return TP_COLUMNS + (TP_WORKLOAD_COLUMNS if any("wall_s" in r for r in rows)
                             else TP_STEP_COLUMNS)
    chosen = list(COLUMNS[kind])
    if any(r.get("wall_s_runs") for r in rows):
        chosen.insert(next(i for i, (h, _) in enumerate(chosen) if h == "wall s") + 1,
                      RUNS_COLUMN)
    if any("matmuls_ms" in r or "anchors_error" in r for r in rows) and kind == "decode":
        chosen += DECODE_ANCHOR_COLUMNS
    if any(r.get("prefix_queried_tokens") is not None for r in rows):
        chosen += PREFIX_COLUMNS
    return chosen


def cells(kind: str, rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    chosen = columns(kind, rows)
    headers = [h for h, _ in chosen]
    body = []
    for row in rows:
        if "error" in row:
            cell = "".join(f" {k}={row[k]}" for k in ("batch", "context") if k in row)
            body.append([row.get("version", kind), f"failed{cell}: {row['error']}"]
                        + [""] * (len(headers) - 2))
        else:
            body.append([read(row) for _, read in chosen])
    return headers, body


def text_table(kind: str, rows: list[dict]) -> str:
    headers, body = cells(kind, rows)
    ok = [b for b in body if not b[1].startswith("failed")]
    widths = [max(len(x) for x in col) for col in zip(headers, *ok)] if ok else [len(h) for h in headers]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(b) if b in ok else f"{b[0]}  {b[1]}" for b in body]
    return "\n".join(out)


def markdown_table(kind: str, rows: list[dict]) -> str:
    headers, body = cells(kind, rows)
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(c.replace("|", "/") for c in b) + " |" for b in body]
    return "\n".join(out)


def environment(device: str) -> dict:
    import torch

    env = {"torch": torch.__version__, "python": platform.python_version(),
           "machine": platform.machine(), "cpus": os.cpu_count(),
           "torch_threads": torch.get_num_threads(),
           # other work on the machine inflates CPU timings; the load says how much there was
           "load_average": round(os.getloadavg()[0], 2)}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    # A copy of the tree sent to another machine may carry an older .git than the commit it
    # holds: the sender names the commit in TORCHLET_COMMIT (docs/gpu.md).
    if os.environ.get("TORCHLET_COMMIT"):
        env["commit"] = os.environ["TORCHLET_COMMIT"]
        return env
    try:
        # -dirty: the tree that ran differs from the commit
        env["commit"] = subprocess.run(["git", "describe", "--always", "--dirty"],
                                       capture_output=True, text=True, cwd=Path(__file__).parent,
                                       timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return env


def save(kind: str, payload: dict, out_dir: str | Path, command: str, device: str) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"kind": kind, "command": command,
               "created": datetime.datetime.now().isoformat(timespec="seconds"),
               "environment": environment(device), **payload}
    path = out / f"{kind}.json"
    path.write_text(json.dumps(payload, indent=1) + "\n")
    chart(kind, payload, out / f"{kind}.png")
    return path


def chart(kind: str, payload: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in payload["rows"] if "error" not in r]
    kind = base_kind(kind)  # the file is `path`; the drawing is the base kind's
    if kind in ("cpu", "gpu-workload"):
        fig, axes = plt.subplots(1, 2, figsize=(11, 0.45 * len(rows) + 1.8))
        names = [r["version"] + ("" if r.get("mode") == "step" else f" ({r.get('mode')})")
                 for r in rows]
        for ax, key, label in ((axes[0], "output_tok_s", "output tokens/s (higher is better)"),
                               (axes[1], "ttft_mean_ms", "mean TTFT, ms (lower is better)")):
            values = [r.get(key) for r in rows]
            ax.barh(names, [v or 0 for v in values], color="tab:blue")
            ax.invert_yaxis()
            ax.set_xlabel(label)
            shown = [v for v in values if v]
            # A one-at-a-time server's queue dwarfs a batched one: log scale when they differ
            # by more than ten times; else from zero, so that bar lengths compare.
            if shown and max(shown) > 10 * min(shown):
                ax.set_xscale("log")
            else:
                ax.set_xlim(0, 1.25 * max(shown, default=1))
                ax.xaxis.set_major_locator(plt.MaxNLocator(4))
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:,.0f}"))
            ax.xaxis.set_minor_formatter(plt.NullFormatter())
            for y, v in enumerate(values):
                ax.annotate(f" {v:,.0f}" if v else " n/a", (v or 0, y), va="center",
                            fontsize=8, annotation_clip=False)
        fig.suptitle(f"{payload.get('workload', {}).get('describe', kind)}", fontsize=9)
    elif kind == "mixed":
        fig, axes = plt.subplots(1, 2, figsize=(11, 0.45 * len(rows) + 1.8))
        names = [r["version"] for r in rows]
        for ax, key, label in ((axes[0], "itl_p99_ms", "decodes' p99 inter-token latency, ms"),
                               (axes[1], "ttft_p50_ms", "long prompts' median TTFT, ms")):
            ax.barh(names, [r.get(key) or 0 for r in rows], color="tab:blue")
            ax.invert_yaxis()
            ax.set_xlabel(label + " (lower is better)")
        fig.suptitle(payload["workload"]["describe"], fontsize=7, wrap=True)
    elif kind == "tp":
        fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.6))
        names = [f"TP={r['tensor_parallel']} rank {r['rank']}"
                 + (f" B={r['batch']}" if "batch" in r else "") for r in rows]
        weights = [r["weights_mib"] for r in rows]
        ax.barh(names, weights, color="tab:blue", label="weights")
        ax.barh(names, [r["kv_mib"] for r in rows], left=weights, color="tab:orange",
                label="K/V")
        ax.invert_yaxis()
        ax.set_xlabel("MiB a rank holds")
        ax.legend(fontsize=8)
        fig.suptitle(payload["workload"]["describe"], fontsize=7, wrap=True)
    elif kind == "serve":
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        # the rates side by side, as labels: "inf" (all at once) has no place on a number line
        at = range(len(rows))
        axes[0].plot(at, [r["output_tok_s"] for r in rows], marker="o")
        axes[0].set_ylabel("output tokens/s")
        for key, style in (("ttft", "-"), ("itl", "--")):
            for q in ("p50", "p99"):
                values = [r[f"{key}_{q}_ms"] for r in rows]
                if any(v is not None for v in values):  # none for whole answers (--no-stream)
                    axes[1].plot(at, [float("nan") if v is None else v for v in values],
                                 marker="o", linestyle=style, label=f"{key.upper()} {q}")
        if axes[1].lines:
            axes[1].set_yscale("log")
            axes[1].legend(fontsize=7)
        axes[1].set_ylabel("ms (lower is better)")
        for ax in axes:
            ax.set_xticks(list(at), [f"{r['rate']:g}" for r in rows])
            ax.set_xlabel("requests per second (inf: all at once)")
        fig.suptitle(payload.get("server", ""), fontsize=7, wrap=True)
    elif kind == "batching":
        fig, ax = plt.subplots(figsize=(6, 2.2))
        r = rows[0]
        ax.barh([0, 1], [r["sequential_s"], r["concurrent_s"]])
        ax.set_yticks([0, 1], [f"{r['requests']} one after another", f"{r['requests']} at once"])
        ax.set_xlabel(f"seconds for {r['requests']} requests of {r['tokens']} tokens "
                      f"(lower is better)")
        fig.suptitle(payload.get("server", ""), fontsize=7, wrap=True)
    elif kind == "structured":
        fig, ax = plt.subplots(figsize=(6, 0.4 * len(rows) + 1.4))
        names = [f"batch {r['batch']}" for r in rows]
        ax.barh(names, [r["ratio"] for r in rows], color="tab:blue")
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.invert_yaxis()
        ax.set_xlabel("decode step with a JSON schema on every request, over none (lower is "
                      "better)")
    elif kind == "speculative":
        fig, ax = plt.subplots(figsize=(8, 0.3 * len(rows) + 1.6))
        names = [f"{r['workload']} B={r['batch']} k={r['k']}"
                 + (f" {r['acceptance']} {r.get('proposer', 'ngram')}" if r["acceptance"] else "")
                 for r in rows]
        ax.barh(names, [r["speedup"] for r in rows], color=["tab:grey" if r["k"] == 0
                                                             else "tab:blue" for r in rows])
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
        ax.set_xlabel("tokens/s over the same cell's k=0 (higher is better)")
        fig.suptitle(payload["workload"]["describe"], fontsize=7, wrap=True)
    elif kind == "main-job":
        fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.6))
        mid = [r["tok_s_median"] for r in rows]
        spread = [[m - r["tok_s_min"] for m, r in zip(mid, rows)],
                  [r["tok_s_max"] - m for m, r in zip(mid, rows)]]
        names = [r["version"] + (f", {r['threads']} thr." if "threads" in r else "") for r in rows]
        ax.barh(names, mid, xerr=spread, color="tab:blue", capsize=3)
        ax.invert_yaxis()
        ax.set_xlabel("tokens/s, median of the rounds, min to max (higher is better)")
        fig.suptitle(payload["workload"]["describe"], fontsize=7, wrap=True)
    elif kind == "long-prompt":
        fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.6))
        mid = [r["first_token_s_median"] for r in rows]
        spread = [[m - min(r["first_token_ms"]) / 1e3 for m, r in zip(mid, rows)],
                  [max(r["first_token_ms"]) / 1e3 - m for m, r in zip(mid, rows)]]
        ax.barh([r["version"] for r in rows], mid, xerr=spread, color="tab:blue", capsize=3)
        ax.invert_yaxis()
        ax.set_xlabel("seconds to the first token, median of the rounds, min to max "
                      "(lower is better)")
        fig.suptitle(payload["workload"]["describe"], fontsize=7, wrap=True)
    elif kind == "decode":
        fig, ax = plt.subplots(figsize=(7, 4.5))
        # A line per version and batch: colour by batch, the newest version solid.
        versions = sorted({r["version"] for r in rows}, reverse=True)
        batches = sorted({r["batch"] for r in rows})
        for v in versions:
            for i, b in enumerate(batches):
                pts = sorted((r["context"], r["ms_per_step"]) for r in rows
                             if r["batch"] == b and r["version"] == v)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                        color=f"C{i}", linestyle="-" if v == versions[0] else "--",
                        label=f"{v} B={b}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context tokens")
        ax.set_ylabel("ms per decode step (lower is better)")
        if rows:
            ax.legend(fontsize=7)
    elif kind == "anchors":
        fig, ax = plt.subplots(figsize=(9, 4.5))
        x = range(len(rows))
        for i, (key, label) in enumerate((("matmuls_ms", "matmuls alone"),
                                          ("static_ms", "static-cache step"),
                                          ("floor_ms", "floor"))):
            ax.bar([j + 0.27 * (i - 1) for j in x], [r[key] for r in rows], 0.27, label=label)
        ax.set_xticks(list(x), [f"B={r['batch']}\nctx={r['context']}" for r in rows], fontsize=7)
        ax.set_ylabel("ms per decode step (lower is better)")
        ax.legend()
    else:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        labels = [f"B={r['batch']}\nctx={r['context']}" for r in rows]
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r["paged_gb_s"] for r in rows], 0.4,
               label=f"{rows[0]['version'] if rows else ''} paged")
        ax.bar([i + 0.2 for i in x], [r["sdpa_gb_s"] for r in rows], 0.4, label="torch SDPA")
        ax.set_xticks(list(x), labels, fontsize=7)
        if payload.get("bandwidth"):
            ax.axhline(payload["bandwidth"] / 1e9, color="grey", linestyle=":",
                       label=f"bound, {payload['bandwidth'] / 1e12:g} TB/s")
        ax.set_ylabel("GB/s of K/V read (higher is better)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
