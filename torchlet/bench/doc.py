"""`torchlet bench report`: docs/benchmarks.md, written from result files only.

Fresh results (bench-results/KIND.json) replace the recorded ones (docs/benchmarks/KIND.json)
when newer; the recorded files travel with the doc, so every figure in it can be traced to the
JSON it came from and to the command that wrote that JSON. The floor is recomputed here by code.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from . import DECODE_STEPS, DECODE_WARMUP
from .floor import H100_RATED_BANDWIDTH, H200_BANDWIDTH, physical_floor
from .report import base_kind, markdown_table
from .workloads import QWEN25_05B, nano_vllm_workload

REPO = Path(__file__).resolve().parents[2]
KINDS = ("main-job", "long-prompt", "cpu", "gpu-workload", "gpu-workload-quantized",
         "gpu-workload-qwen3", "mixed",
         "mixed-cpu", "decode", "decode-quantized", "anchors", "kernel", "tp", "serve", "serve-gpu",
         "batching", "speculative", "speculative-gpu", "speculative-gpu-invariant", "structured",
         "structured-gpu")
TITLES = {
    "main-job": "CPU main job: torchlet generate's default version against Hugging Face generate",
    "long-prompt": "CPU long prompt: torchlet generate's default version against Hugging Face "
                   "generate, to the first token",
    "cpu": "CPU: what each version buys",
    "gpu-workload": "GPU: nano-vllm's workload on a Qwen2.5-0.5B-shaped model",
    "gpu-workload-quantized": "GPU: nano-vllm's workload with quantized weights (v18) against "
                              "v16's",
    "gpu-workload-qwen3": "GPU: nano-vllm's workload on a Qwen3-0.6B-shaped model",
    "mixed": "Mixed traffic: requests decoding while long prompts arrive (chunked prefill)",
    "mixed-cpu": "Mixed traffic on the CPU, the small CPU model (chunked prefill)",
    "decode": "Decode step: batch x context",
    "decode-quantized": "Decode step with quantized weights (v18) against v16's, batch x context",
    "anchors": "Anchors of a decode step: its matmuls alone, a gpt-fast-style step, the floor",
    "kernel": "Paged decode attention kernel against torch SDPA",
    "tp": "Tensor parallelism: what each rank holds (v16)",
    "serve": "torchlet serve under a Poisson stream of requests",
    "serve-gpu": "torchlet serve on the GPU under a Poisson stream of requests",
    "batching": "What batching buys a server: the same requests one after another, then at once",
    "speculative": "Speculative decoding (v17): k guessed tokens a step against none",
    "speculative-gpu": "Speculative decoding (v17) on the GPU: k guessed tokens a step against "
                       "none",
    "speculative-gpu-invariant": "Speculative decoding (v17) on the GPU, batch-invariant: "
                                 "exact in bfloat16",
    "structured": "Structured output (v19): a JSON schema on every request against none",
    "structured-gpu": "Structured output (v19) on the GPU: a JSON schema on every request "
                      "against none",
}
HOW_TO = {
    "main-job": "torchlet bench main-job --threads 1,2",
    "long-prompt": "torchlet bench long-prompt --threads 1",
    "cpu": "torchlet bench cpu",
    "gpu-workload": "torchlet bench gpu-workload --hf-baseline",
    "gpu-workload-quantized": "torchlet bench gpu-workload --versions v16,v18 --quantize int8",
    "gpu-workload-qwen3": "torchlet bench gpu-workload --model-shape qwen3-0.6b --versions v20",
    "mixed": "torchlet bench mixed --versions v14,v15",
    "mixed-cpu": "torchlet bench mixed --versions v14,v15 --device cpu",
    "decode": "torchlet bench decode",
    "decode-quantized": "torchlet bench decode --versions v16,v18 --quantize int8 --no-anchors",
    "anchors": "torchlet bench anchors",
    "kernel": "torchlet bench kernel",
    "tp": "torchlet bench tp",
    "serve": "torchlet bench serve --device cpu",
    "serve-gpu": "torchlet bench serve --device cuda --model DIR (docs/probes/serve_model_dir.py "
                 "writes one)",
    "batching": "torchlet bench batching --device cpu",
    "speculative": "torchlet bench speculative",
    "speculative-gpu": "torchlet bench speculative --device cuda --model SmolLM2's GGUF file",
    "speculative-gpu-invariant": "torchlet bench speculative --device cuda --model SmolLM2's GGUF "
                                 "file --batch-invariant",
    "structured": "torchlet bench structured",
    "structured-gpu": "torchlet bench structured --device cuda --model DIR "
                      "(docs/probes/serve_model_dir.py writes one)",
}
# What both serve sections say of the run; each adds how its model is made.
SERVE_NOTE = ("The server runs in a child process (`torchlet serve`, its banner: {server}); "
              "the client, in this one, streams each request from /v1/completions as OpenAI's "
              "clients do. TTFT: from a request's send to its first token; ITL: the gaps "
              "between a request's next tokens; output tok/s: every request's tokens over the "
              "seconds from the first send to the last token. The same requests at every rate, "
              "after the first 8 sent once at once and not measured (a server's first prompts "
              "compile its kernels; runs before 2026-12-03 09:20 UTC had no such warm-up). ")
# How the benches that run a workload through run.py time it (frozen_heap), said once.
FROZEN = ("Each timed run starts after a full garbage collection, with every object alive then "
          "frozen (runs before 2026-12-06 05:20 UTC were not)")
NOTES = {
    "main-job": "One process: Hugging Face's model built from the same checkpoint tensors, and "
                "each version built and streamed as `torchlet generate` does. After one untimed "
                "warm-up each, the runs alternate over the rounds; a run's tokens/s is its "
                "output tokens over the seconds from the call to its last token, and x HF is the "
                "ratio of the medians. Same token ids: each version's greedy ids against HF's. A "
                "version with a prefix cache finds the prompt's full blocks cached by the "
                "warm-up in every timed round (its hit column), which a one-shot `torchlet "
                "generate` would not. Given several thread counts (`--threads 1,2`), the whole "
                "comparison runs at each in turn, x HF within its own count. llama.cpp, where "
                "llama-cpp-python is installed (`pip install 'torchlet[llama]'`), is an anchor, "
                "not a contestant: the same prompt ids and GGUF file, greedy, n_threads the "
                "row's count, alternating with the others, but computing on the file's own "
                "quantized weights, so its ids are reported and not required to be HF's.",
    "long-prompt": "One process, contenders built as for the main job; each run is one "
                   "greedy token after the whole prompt, so its time is the prefill's. After "
                   "one untimed warm-up each on 64 other tokens, the runs alternate over the "
                   "rounds; x HF is HF's median seconds over the version's. CPU s: the CPU "
                   "seconds this process spent in a run, which other work on the machine does "
                   "not stretch as it stretches the wall time. A version with a prefix cache "
                   "finds the prompt cached from the second timed round on (its hit column).",
    "cpu": "Versions with the step API (request_states and later) are driven by add_request/step, "
           "all requests queued at time 0; older versions serve the requests one after another "
           "through stream() (mode `stream`), since generate() can't give each request its own "
           "length. TTFT counts from the moment every request was queued, so a one-at-a-time "
           "server's TTFT includes the queue. Steps of a `stream` run are forward passes, one per "
           "token. Triton versions run their layers' PyTorch path (`Triton kernels off`), as `torchlet "
           "generate` runs them on a CPU: the interpreter is for the specs. Each version is built "
           "with its defaults (v07's CPU graph stand-in on, v14's overlap on). " + FROZEN + ". "
           "Peak memory: {memory}.",
    "gpu-workload": "All 256 requests are queued at time 0 after a one-request warm-up; eos is "
                    "ignored, so every request makes exactly the tokens it asks for. % of floor = "
                    "floor / wall time. The HF baseline runs length-sorted, left-padded batches of "
                    "64 and counts only the tokens the requests asked for. " + FROZEN[:-1] +
                    ": on a CPU, nano-vllm's run met one gen-2 collection of 82-86 ms, "
                    "docs/perf-notes.md). Peak memory: {memory}.",
    "mixed": "One process, one model; each version built with max_running for every request, "
             "the chunked-prefill one (v15) with the budget the command gives as its "
             "max_step_tokens, the others with room for a whole long prompt in one step (which "
             "v14 needs to admit it). After a warm-up (as many short requests and one long prompt, "
             "of other ids, the short ones decoding past the prompt's last slice, so that every "
             "kind of step the run makes has run before it: its kernels compiled and loaded, its "
             "graphs captured; warm-ups before 2026-12-06 06:05 UTC ran one short request), the "
             "decoding requests start; once "
             "each has its first token, the long prompts arrive one every few steps. A step's "
             "time is taken when step() returns its tokens. ITL: the gaps between a decoding "
             "request's tokens from the first long prompt's arrival on; TTFT: a long prompt's "
             "arrival to its first token. Percentiles are nearest-rank. " + FROZEN + ".",
    "decode": f"Each cell prefills B requests of `context` tokens, then times {DECODE_STEPS} "
              f"pure decode steps after {DECODE_WARMUP} untimed ones (runs before 2026-12-06 "
              "11:15 UTC: 20 after 5; the step stats are checked: no prefill row, all B "
              "requests decoding). Bytes per step = every weight once + B x context x KV bytes "
              "per token; GPU ms/step is the time the torch profiler saw at least one kernel "
              "running (overlapping kernels, as dependent launches overlap, counted once; runs "
              "before 2026-12-06 11:05 UTC summed kernel times), the rest of ms/step is time "
              "with no kernel running (the GPU waiting on the host, or the gaps between a "
              "graph's kernels); kernels/step counts the kernels it launched (a replayed "
              "graph's one by one), and the top kernels' ms are each kernel's own time, from "
              "its start. The timed steps start after a full garbage collection, with every "
              "object alive then frozen (runs before 2026-12-06 11:10 UTC were not).",
    "anchors": "On the decode bench's model and cells, in one process: (a) matmuls alone: the "
               "GEMMs of one decode step and nothing else (per layer the fused q/k/v, o, the "
               "fused gate/up and down, then the LM head), through torch's matmul (cuBLAS), "
               "captured as one CUDA graph; (b) a plain-PyTorch static-cache step in the style of "
               "gpt-fast (torchlet/bench/static_step.py: a static K/V cache per layer, fused "
               "projections, RoPE tables, SDPA over the cache under a mask, greedy argmax), one "
               "layer compiled by torch.compile and the whole step captured as one CUDA graph "
               "(the timed column says how it ran); its tokens from random weights are checked "
               "against Hugging Face's float64 model by spec/test_bench_anchors.py; (c) the "
               "floor: every weight once and B x context tokens of K/V, over the bandwidth. Each "
               "step decodes every request at position `context` again, so the cache holds "
               "context + 1 tokens, rounded up to 16. ms: wall time of back-to-back replays; GPU "
               "ms and kernels from the torch profiler.",
    "kernel": "The same K/V, scattered over randomly ordered blocks for the paged kernel and "
              "contiguous [B, KV heads, context, head_dim] for SDPA (enable_gqa). Bytes = K + V "
              "once, q in and out once; max abs diff compares the two outputs. Timed `graph`: "
              "each call captured in a CUDA graph and its replays timed, as the engine runs it; "
              "`eager`: the calls themselves, host checks and launches included.",
    "tp": "v16_tensor_parallel at each tensor-parallel degree, its ranks started by the bench on "
          "this machine (gloo on a CPU, NCCL on GPUs), each drawing only its own shard of the "
          "seeded random weights. Per rank: the weight and K/V bytes it holds (the norms, "
          "replicated, are a few KiB), its peak memory, and rank 0's decode step (the median of "
          "the timed steps) against the weight-read floor (a rank's weight bytes over 4.3 TB/s, "
          "meaningful on an H200 only). On a CPU the step times say nothing about speed: the "
          "ranks share the machine's cores, and each collective crosses loopback for a model "
          "whose maths takes microseconds. Two ranks on GPUs need a machine of two GPUs (issue "
          "28: docs/probes/tp_h200.py runs its specs, workloads and the 72B shape in one call).",
    "serve": SERVE_NOTE + (
             "On a CPU, `--model /tmp/tiny-chat` is the specs' tiny chat model (a random Llama "
             "of 2 layers, hidden 64, a byte tokenizer, context 128), written by `python -c "
             "\"from pathlib import Path; from spec.support.models.hf_dirs import save_tiny; "
             "save_tiny(Path('/tmp/tiny-chat'), 'llama', tokenizer=True, seed=5, "
             "printable=True)\"`."),
}
NOTES["batching"] = (
    "The server runs in a child process (`torchlet serve`, its banner: {server}), with as many "
    "running requests allowed as are sent. The client sends each request to /v1/completions "
    "and waits for its whole answer before the next, then sends them all at once; one request "
    "before both is not measured. The ratio is the seconds of the second over the first: a "
    "batched step reads the weights once for every request in it, so the lower the better "
    "(issue 42's target on a CPU: 0.35 at most). Same answers: each request's text equal in "
    "both runs.")
# What both structured sections say of the run, after where its model comes from.
STRUCTURED_NOTE = (
    "At each batch B the same B "
    "chat prompts (asking for a person as JSON) run through the step API twice, in turn: "
    "unconstrained, eos ignored, then with torchlet/bench/structured.py's SCHEMA as every "
    "request's grammar (compiled once by xgrammar), each ending at eos once its JSON is "
    "complete; untimed warm-ups first: a short unconstrained request, then the B constrained "
    "prompts for 8 tokens (so what a constrained step runs outside its graphs at this batch, "
    "the redraw, is compiled before the timing). A decode step: a step in which all B requests "
    "decode and no prompt is computed (a constrained answer ends when its JSON does, and a "
    "step of fewer rows costs less, so only these compare); its time is their mean (the medians "
    "beside it: one slow step moves a mean of a hundred), a step timed "
    "from its start to its return with no sync around it (a step that launched the next decode "
    "ahead returns while the GPU computes it, as a serving loop sees it). x none: the "
    "constrained step's time over the unconstrained one's. With overlap a constrained step "
    "still launches the next decode ahead; its constrained rows are drawn again, masked, once "
    "the host has read the step's tokens, so the ratio holds the masks' fill where it is not "
    "hidden behind the GPU's step, and the redraw's kernels. Answers that validate: the constrained answers json.loads parses "
    "and jsonschema accepts (the command exits 1 otherwise). Issue 47's target: at most 1.10 at "
    "batch 64 on the H200.")
NOTES["structured"] = "One process, one version built once, on the default model. " + \
    STRUCTURED_NOTE
NOTES["structured-gpu"] = (
    "One process, one version built once, on `--model`. " + STRUCTURED_NOTE + " On the GPU, "
    "`--model` is a Qwen2.5-0.5B-shaped model with `bench gpu-workload`'s random weights and the "
    "specs' byte tokenizer, written by `python docs/probes/serve_model_dir.py /tmp/qwdir --device "
    "cuda` (no checkpoint can be downloaded there), bfloat16, CUDA graphs and overlap on.")
NOTES["speculative"] = (
    "One process, one version built once for k=0 (speculative_tokens=0: v16's engine, no "
    "verifying pass) and once for each other k and acceptance, the engines in turn at each cell "
    "after one untimed warm-up each; every engine runs the cells in the same order. Before its "
    "timed run of a cell an engine prefills the cell's prompts twice, a token each, untimed: the "
    "timed run then finds them in the prefix cache as the second time did, so its prompt passes "
    "have shapes already seen, and no graph of a new shape (v15's slice graphs, captured at a "
    "shape's first pass) is captured while it is timed; no token is decoded there, so the "
    "speculation policy, which judges verifying passes, starts the timed run as it left the "
    "last one. A cell: the workload's "
    "first B prompts added at once and stepped to their end, greedy, eos ignored. tok/s: the "
    "cell's tokens over its wall time, one run; x k=0: over the same cell's k=0 row. tokens / "
    "verify pass: speculation_stats()'s tokens over verify_passes during the cell, a pass's "
    "requests together (at batch 1, the tokens one pass of the model gives); acceptance rate: "
    "accepted over proposed guesses. Tokens equal to k=0's: position by position, request by "
    "request; exact acceptance promises all of them, and the check under the table says whether "
    "they were. Greedy, rejection keeps the same tokens too: a greedy p is all on the argmax. "
    "proposer: what guessed (`--proposers`): ngram is prompt lookup in the request's own text, "
    "self:N the model's own first N layers with its final norm and LM head (a self-draft, "
    "which v17 runs as a draft model: its v16 engine generates the guesses), a path a draft "
    "model. A self-draft's layers were trained to feed the layers after them, not the LM head, "
    "so how often its guesses are kept is this measurement, not a given; and each of a draft's "
    "proposals is a generate call on its own engine, which the verifying pass waits for.")
NOTES["speculative-gpu"] = NOTES["speculative"] + (
    " On the GPU: the default model's GGUF file named by `--model` (carried there in two "
    "halves: no model can be downloaded), bfloat16, CUDA graphs and overlap on. There exact "
    "acceptance keeps the tokens of k=0 only where a verifying pass computes each row's logits "
    "as a decode step computes them, bit for bit, and in bfloat16 it does not: a pass of k + 1 "
    "rows a request runs other kernels than a decode step's one row (v13's gemv serves one row "
    "only, cuBLAS picks its kernel by the number of rows), whose sums round differently, so a "
    "greedy near-tie can go the other way. The check under the table counts where it did; "
    "the batch-invariant section below runs the same with `--batch-invariant`.")
NOTES["speculative-gpu-invariant"] = NOTES["speculative"] + (
    " On the GPU as above, every engine (k=0's too) built with batch_invariant=True (v17's "
    "model.py): every product, the LM head's too, is v13's gemv, which sums each row as a lone "
    "row, and the attention cuts every context every 256 tokens whatever the batch, so a "
    "verifying pass computes each row's logits bit for bit as a decode step does, and exact "
    "acceptance keeps k=0's tokens in bfloat16. Its k=0 rows against the section above's k=0 "
    "rows are the mode's cost.")
# what a run with --quantize adds to its bench's note
QUANTIZED_NOTE = (" v18's rows are built with `--quantize`'s format, quantized at load from the "
                  "same random weights; v16's read them in the run's dtype.")
NOTES["decode-quantized"] = NOTES["decode"] + QUANTIZED_NOTE
NOTES["gpu-workload-quantized"] = NOTES["gpu-workload"] + QUANTIZED_NOTE
NOTES["gpu-workload-qwen3"] = NOTES["gpu-workload"]
NOTES["mixed-cpu"] = NOTES["mixed"]
NOTES["serve-gpu"] = (SERVE_NOTE + "On the GPU, `--model` is a "
                      "Qwen2.5-0.5B-shaped model with `bench gpu-workload`'s random weights and "
                      "the specs' byte tokenizer, written by `python docs/probes/serve_model_dir.py "
                      "/tmp/m05 --device cuda` (only the byte tokenizer's printable characters "
                      "have nonzero embedding rows, so every token streams as one character).")

PREFIX_NOTE = ("Prefix hit rate: of the prompt tokens a version with prefix_cache looked up in its "
               "cache during the measured run (warm-up excluded), the share it found cached and "
               "did not compute (prefix_cache_stats()); the prefill / decode column counts "
               "prompt tokens scheduled, cached or not. Requests admitted in the same step as "
               "the first one with their prefix compute it too: a block is shared only once its "
               "K/V is written.")

RUNS_NOTE = ("Each version ran several times in this call, interleaved, each on a freshly built "
             "engine; its row is its median run's (of an even count, the faster middle one), "
             "beside every run's wall time in run order. HF generate ran once; x HF generate is "
             "its wall time over the median run's.")
DECODE_ANCHORS_NOTE = ("The last three columns are the cell's anchors, timed in the same process "
                       "after the version's cell (`torchlet bench anchors` says what they are): "
                       "the step's matmuls alone, a gpt-fast-style static-cache step, and the "
                       "floor at `context` tokens.")


def gather(results: Path, recorded: Path) -> dict[str, dict]:
    """The newest result of each kind; a fresh one is copied (with its chart) next to the doc."""
    chosen = {}
    for kind in KINDS:
        found = [json.loads(p.read_text()) | {"_dir": p.parent}
                 for p in (results / f"{kind}.json", recorded / f"{kind}.json") if p.exists()]
        if not found:
            continue
        best = max(found, key=lambda r: r.get("created", ""))
        if Path(best["_dir"]).resolve() != recorded.resolve():
            recorded.mkdir(parents=True, exist_ok=True)
            for suffix in (".json", ".png"):
                src = Path(best["_dir"]) / f"{kind}{suffix}"
                if src.exists():
                    shutil.copyfile(src, recorded / f"{kind}{suffix}")
        chosen[kind] = best
    return chosen


def section(kind: str, result: dict | None, assets: str) -> list[str]:
    out = [f"## {TITLES[kind]}", ""]
    if result is None:
        return out + [f"Not measured yet. Run `{HOW_TO[kind]}`, then `torchlet bench report`.", ""]
    env = result.get("environment", {})
    where = env.get("gpu") or (f"CPU, {env.get('cpus')} cores, torch threads {env.get('torch_threads')}, "
                               f"load average {env.get('load_average', '?')} when it ended")
    out += ["```", result["command"], "```", "",
            f"{result.get('created', '?')} on {where}; torch {env.get('torch', '?')}, "
            f"commit {env.get('commit', '?')}."]
    if "workload" in result:
        out.append(f"Workload: {result['workload']['describe']}.")
    if "model" in result:
        m = result["model"]
        out.append(f"Model: random weights, hidden {m['hidden_size']}, {m['num_layers']} layers, "
                   f"{m['num_heads']} query / {m['num_kv_heads']} KV heads of {m['head_dim']}, "
                   f"intermediate {m['intermediate_size']}, vocab {m['vocab_size']}.")
    memory = next((r["memory_measure"] for r in result["rows"] if "memory_measure" in r), "n/a")
    note = NOTES[kind].format(memory=memory, server=result.get("server", "?"))
    # what this run left out, and why; what each draft proposer did (bench speculative)
    note += "".join(f" {n}" for n in result.get("notes", []))
    # main-job's and long-prompt's notes say what the hit column means for one prompt repeated
    if kind not in ("main-job", "long-prompt") and any(r.get("prefix_queried_tokens") is not None
                                  for r in result["rows"]):
        note += " " + PREFIX_NOTE
    if any(r.get("wall_s_runs") for r in result["rows"]):
        note += " " + RUNS_NOTE
    if base_kind(kind) == "decode" and any("matmuls_ms" in r for r in result["rows"]):
        note += " " + DECODE_ANCHORS_NOTE
    out += ["", note, "", markdown_table(kind, result["rows"]), ""]
    if kind == "main-job":
        from .targets import main_job_lines
        out += [*main_job_lines(result), ""]
    if kind == "long-prompt":
        from .targets import long_prompt_lines
        out += [*long_prompt_lines(result), ""]
    if base_kind(kind) == "decode":
        out += top_kernel_lines(result["rows"])
    if result.get("checks"):
        out += [*result["checks"], ""]
    out += anchor_notes(result["rows"])
    if result.get("anchors"):
        from .anchors import workload_anchor_lines
        out += [*workload_anchor_lines(result["anchors"], result["rows"]), ""]
    if "floor" in result:
        out += ["Floor of this run's workload:", "", "```", *result["floor"]["lines"], "```", ""]
    out += [f"![{kind}]({assets}/{kind}.png)", ""]
    return out


def top_kernel_lines(rows: list[dict]) -> list[str]:
    """The kernels that took the most device time in a step, per profiled cell of batch 1 and 64."""
    out = []
    for r in rows:
        if r.get("top_kernels") and r["batch"] in (1, 64):
            out += [f"Top kernels by GPU time, {r['version']}, batch {r['batch']}, context "
                    f"{r['context']} ({r['kernels_per_step']:.0f} kernels per step):", "",
                    "| kernel | ms/step | launches/step |", "|---|---|---|"]
            out += [f"| `{name}` | {ms:.4f} | {n:g} |" for name, ms, n in r["top_kernels"]]
            out.append("")
    return out


def anchor_notes(rows: list[dict]) -> list[str]:
    """Why a cell's anchors did not run as asked: a compile that failed, or no anchors at all."""
    notes = [f"- Anchors at batch {r['batch']}, context {r['context']}: "
             f"{r.get('static_note') or 'failed: ' + r['anchors_error']}"
             for r in rows if r.get("static_note") or r.get("anchors_error")]
    return [*notes, ""] if notes else []


def floor_section() -> list[str]:
    workload = nano_vllm_workload()
    floor = physical_floor(QWEN25_05B, workload)
    return ["## The physical floor of the GPU workload", "", "```", "torchlet bench floor", "```",
            "", "Recomputed from the model's tensor shapes and the workload's lengths each time "
            "this page is generated. Decode is bound by memory (each decode pass reads every "
            "weight once; each request reads its whole context's K/V), prefill by compute (its "
            "matmuls and causal attention).", "", "```", workload.describe(), *floor.lines(), "```",
            ""]


def targets_section(results: dict[str, dict]) -> list[str]:
    """The targets' verdicts, under a line naming the GPU each run they read came from (the
    targets are set for an H200; a run on another card says so here)."""
    from .targets import verdicts
    lines = verdicts(results)
    envs = {kind: r.get("environment", {}) for kind, r in results.items()
            if kind in ("gpu-workload", "gpu-workload-qwen3", "kernel", "decode", "anchors",
                        "mixed") and r}
    cards = [f"{kind} on {env.get('gpu') or 'a CPU'} ({env.get('commit', '?')})"
             for kind, env in envs.items()]
    where = ["Runs read: " + "; ".join(cards) + "."] if cards else []
    if any("H100" in (env.get("gpu") or "") for env in envs.values()):
        share = H100_RATED_BANDWIDTH / H200_BANDWIDTH
        where += ["", f"An H100's HBM3 is rated {H100_RATED_BANDWIDTH / 1e12:.2f} TB/s, "
                      f"{100 * share:.0f}% of the {H200_BANDWIDTH / 1e12:.1f} TB/s the bounds "
                      f"and floors here count (the H200's measured copy bandwidth): on an H100 "
                      f"no kernel reaches a bar above {100 * share:.0f}% of the bound, and a "
                      f"floor's reads take {1 / share:.2f}x as long."]
    return ["## Targets set for the H200 (the newest version in each run)", "", *where, "",
            *lines, ""]


def write_doc(results: Path, doc: Path | None = None) -> Path:
    doc = doc or REPO / "docs" / "benchmarks.md"
    recorded = doc.parent / "benchmarks"
    chosen = gather(results, recorded)
    out = ["# Benchmarks", "",
           "Generated by `torchlet bench report` from the result files in "
           f"`{recorded.name}/`, each written by the command shown above its table. Don't edit "
           "figures here: rerun the command, then `torchlet bench report`.", ""]
    for kind in KINDS:
        out += section(kind, chosen.get(kind), recorded.name)
        if kind == "gpu-workload":
            out += floor_section()
    out += targets_section(chosen)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text("\n".join(out).rstrip() + "\n")
    return doc
