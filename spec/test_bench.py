"""`torchlet bench`: what each version buys, measured through the engine contract.

What it introduces: a harness that runs a workload through chosen versions and reports output and
total tok/s, time to first token, time per output token, peak memory, steps and the
prefill/decode split; a JSON file and a PNG chart per run; docs/benchmarks.md regenerated from
those files; and the physical floor of nano-vllm's GPU workload, computed from the model's shapes.

Why the versions need it: every version after v00 exists because it buys speed or memory. Without
a measurement through the same contract for all of them, those claims are folklore, and without
a floor nobody knows how far the last version is from the hardware.

Core principle: engines are reached only through the contract (build, step API or stream), the
tokens counted are the tokens the engines produced, and the floor is counted from tensor shapes,
never typed in. These specs check the counts and the arithmetic, never a timing.

Files to compare: torchlet/bench/run.py (building an engine), torchlet/bench/drive.py (driving
it), torchlet/bench/floor.py (the floor), torchlet/bench/workloads.py (nano-vllm's draw),
torchlet/bench/doc.py (the doc from the JSON), torchlet/bench/main_job.py (one chat prompt
against Hugging Face generate); spec/test_build_options.py checks what the bench reads of each
version (OPTIONS, KERNELS).

Tradeoff left visible: CPU timings on a shared 2-core machine are noisy, and versions without the
step API serve requests one at a time (generate() can't give each request its own length), so
their rows mix what the version computes with how the contract lets a server drive it.
"""
from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import implementations
from torchlet.bench.floor import physical_floor, weight_bytes
from torchlet.bench.report import markdown_table
from torchlet.bench.workloads import (CPU_MODEL, QWEN25_05B, cpu_workload, nano_vllm_workload,
                                      with_shared_prefix)
from torchlet.checkpoints import hf_config_dict
from torchlet.cli import main
from torchlet.contract import (MAX_STEP_TOKENS, PAGED_DECODE_ATTENTION, PREFIX_CACHE,
                              REQUEST_STATES, TorchletError)


@pytest.fixture(scope="module")
def hf_meta_qwen():
    """Hugging Face's own Qwen2 at the benchmark's shape, on the meta device: shapes, no data."""
    import transformers

    cfg = {k: v for k, v in hf_config_dict(QWEN25_05B).items()
           if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**cfg)).to(torch.bfloat16)


def test_nano_vllm_workload_draws_142827_prompt_and_133966_output_tokens():
    w = nano_vllm_workload()
    assert (w.num_requests, w.prompt_tokens, w.output_tokens) == (256, 142827, 133966)
    assert all(100 <= len(p) <= 1024 for p in w.prompts)
    assert all(100 <= n <= 1024 for n in w.output_lens)
    assert all(0 <= t <= 10000 for p in w.prompts for t in p)
    assert all(w.params(i).ignore_eos for i in range(w.num_requests))


def test_floor_weights_are_the_parameters_hugging_face_counts(hf_meta_qwen):
    hf_bytes = sum(p.numel() * p.element_size() for p in hf_meta_qwen.parameters())
    assert weight_bytes(QWEN25_05B) == hf_bytes  # tied embeddings counted once, as HF does


def test_floor_kv_bytes_are_what_hugging_face_caches_per_token(hf_meta_qwen):
    tokens = 5
    out = hf_meta_qwen(torch.zeros(1, tokens, dtype=torch.long, device="meta"), use_cache=True)
    cache = out.past_key_values
    cached = sum(t.numel() * t.element_size() for layer in cache.layers
                 for t in (layer.keys, layer.values))
    assert QWEN25_05B.kv_bytes_per_token(torch.bfloat16) == cached // tokens == 12 * 1024


def test_the_qwen3_shape_is_hugging_faces_and_one_layer_of_it_gives_hugging_faces_logits(
        monkeypatch):
    """--model-shape qwen3-0.6b cut to one layer (28 cost seconds here and add nothing): Hugging
    Face's own Qwen3 at that shape holds the parameters the floor counts (q_norm and k_norm
    included), and with a small vocabulary, built as the bench builds its models (random
    weights; v13, on its PyTorch path here), it gives that Qwen3's logits: head_dim 128 declared
    on a hidden size of 1024."""
    import argparse
    import dataclasses

    from spec.support.oracles.oracle import hf_model
    from torchlet.bench.flags import shape_of
    from torchlet.bench.workloads import QWEN3_06B, random_checkpoint
    from torchlet.checkpoints import hf_classes

    assert shape_of(argparse.Namespace(model_shape="qwen3-0.6b"), "cuda") == QWEN3_06B
    config = dataclasses.replace(QWEN3_06B, num_layers=1)
    config_cls, model_cls = hf_classes("qwen3")
    cfg = {k: v for k, v in hf_config_dict(config).items()
           if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        meta = model_cls(config_cls(**cfg)).to(torch.bfloat16)
    assert weight_bytes(config) == sum(p.numel() * p.element_size() for p in meta.parameters())
    v13 = implementations.load("v13")  # imported as the session has Triton (jit reads it once)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # an engine's layers read it at build
    ckpt = random_checkpoint(dataclasses.replace(config, vocab_size=256))
    prompt = [5, 77, 200, 12, 9]
    with torch.inference_mode():
        expected = hf_model(ckpt, torch.float32)(torch.tensor([prompt])).logits[0]
    got = v13.build(ckpt, use_graphs=False, max_model_len=16).logits(prompt)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_floor_adds_weight_reads_kv_reads_and_prefill_compute(hf_meta_qwen):
    w, c = nano_vllm_workload(), QWEN25_05B
    floor = physical_floor(c, w, bandwidth=4.3e12, flops_rate=790e12)
    weights = sum(p.numel() * 2 for p in hf_meta_qwen.parameters())
    layer_matmul = sum(m.weight.numel() for m in hf_meta_qwen.model.layers.modules()
                       if isinstance(m, torch.nn.Linear))
    prompts = [len(p) for p in w.prompts]
    # Closed form of sum_{t=1}^{n-1} (P + t): decode pass t reads P + t cached tokens.
    kv_tokens = sum((n - 1) * p + (n - 1) * n // 2 for p, n in zip(prompts, w.output_lens))
    flops = (2 * layer_matmul * sum(prompts)
             + 4 * c.num_layers * c.num_heads * c.head_dim * sum(p * (p + 1) // 2 for p in prompts)
             + 2 * c.vocab_size * c.hidden_size * len(prompts))
    expected = ((max(w.output_lens) - 1) * weights + kv_tokens * 12288) / 4.3e12 + flops / 790e12
    assert floor.kv_tokens_read == kv_tokens
    assert floor.prefill_flops == flops
    assert floor.seconds == pytest.approx(expected, rel=1e-12)
    assert floor.seconds == pytest.approx(0.715, abs=0.005)  # the figure the issue quotes
    assert floor.lines()[-1].endswith(f"= {expected:.3f} s")


def two_versions() -> tuple[str, str]:
    """The first version without the step API and the first with it."""
    found = [v for v in implementations.discover() if hasattr(v.package, "build")]
    plain = next(v for v in found if REQUEST_STATES not in v.capabilities)
    stepwise = next(v for v in found if REQUEST_STATES in v.capabilities)
    return plain.name, stepwise.name


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    names = two_versions()
    assert main(["bench", "cpu", "--versions", ",".join(names), "--requests", "4",
                 "--in-process", "--quiet", "--out", str(out)]) == 0
    return out, names


def test_bench_cpu_writes_a_json_row_per_version_with_the_tokens_it_counted(cpu_run):
    out, names = cpu_run
    result = json.loads((out / "cpu.json").read_text())
    workload = cpu_workload(4)
    assert result["kind"] == "cpu"
    assert result["command"].startswith("torchlet bench cpu ") and "--requests 4" in result["command"]
    assert result["workload"]["output_tokens"] == workload.output_tokens
    assert [r["version"] for r in result["rows"]] == list(names)
    for row in result["rows"]:
        assert "error" not in row, row
        assert row["output_tokens"] == workload.output_tokens
        assert row["prompt_tokens"] == workload.prompt_tokens
        assert row["steps"] > 0 and row["wall_s"] > 0 and row["ttft_mean_ms"] > 0
        assert row["output_tok_s"] == pytest.approx(row["output_tokens"] / row["wall_s"])


def test_step_api_rows_split_prefill_and_decode_tokens(cpu_run):
    out, _ = cpu_run
    row = json.loads((out / "cpu.json").read_text())["rows"][1]
    workload = cpu_workload(4)
    assert row["mode"] == "step"
    assert row["prefill_tokens"] == workload.prompt_tokens  # each prompt prefilled once
    # every token but a request's first (which its prefill yields) needs a decode row
    assert row["decode_tokens"] == workload.output_tokens - workload.num_requests


def test_bench_cpu_draws_a_png_chart(cpu_run):
    out, _ = cpu_run
    assert (out / "cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_takes_every_figure_from_the_json_next_to_its_command(cpu_run, tmp_path):
    out, _ = cpu_run
    doc = tmp_path / "docs" / "benchmarks.md"
    assert main(["bench", "report", "--results", str(out), "--doc", str(doc)]) == 0
    text = doc.read_text()
    result = json.loads((out / "cpu.json").read_text())
    assert result["command"] in text
    for row in result["rows"]:
        assert f"{row['output_tok_s']:,.1f}" in text
    assert physical_floor(QWEN25_05B, nano_vllm_workload()).lines()[-1] in text
    assert (tmp_path / "docs" / "benchmarks" / "cpu.json").exists()
    assert (tmp_path / "docs" / "benchmarks" / "cpu.png").exists()


def test_the_targets_section_names_the_card_and_commit_of_every_run_it_reads():
    """The targets are set for an H200; the committed runs they read may come from another card,
    and the section says which, run by run (docs/benchmarks.md's last section), and for an
    H100 how its rated bandwidth stands against the 4.3 TB/s the bounds count."""
    from pathlib import Path

    from torchlet.bench.doc import targets_section
    committed = Path(__file__).parent.parent / "docs" / "benchmarks"
    results = {k: json.loads((committed / f"{k}.json").read_text())
               for k in ("gpu-workload", "decode", "kernel")}
    results["gpu-workload"]["environment"]["gpu"] = "NVIDIA H100 80GB HBM3"
    text = "\n".join(targets_section(results))
    assert "Targets on the H200" not in text
    for kind, result in results.items():
        env = result["environment"]
        assert f"{kind} on {env['gpu']} ({env['commit']})" in text
    # A run on an H100 says what its memory allows against the H200's bounds; H200 runs alone
    # say nothing of it.
    assert "rated 3.35 TB/s, 78% of the 4.3 TB/s" in text and "above 78% of the bound" in text
    for result in results.values():
        result["environment"]["gpu"] = "NVIDIA H200"
    assert "rated" not in "\n".join(targets_section(results))


def test_decode_microbenchmark_times_only_pure_decode_steps(tmp_path):
    stepwise = next(v.name for v in implementations.discover() if hasattr(v.package, "build")
                    and v.option_for(MAX_STEP_TOKENS) is not None)
    # A step budget below prompt + decode rows: the bench raises it, or a version that does not
    # split prompts would never admit the second request.
    assert main(["bench", "decode", "--device", "cpu", "--versions", stepwise, "--batches", "2",
                 "--contexts", "8", "--steps", "2", "--warmup", "1", "--max-step-tokens", "8",
                 "--quiet", "--out", str(tmp_path)]) == 0
    [row] = json.loads((tmp_path / "decode.json").read_text())["rows"]
    assert "error" not in row, row
    assert row["batch"] == 2 and row["context"] == 8 and row["ms_per_step"] > 0
    assert row["bytes_per_step"] > weight_bytes(json_config(tmp_path / "decode.json"), 4)


def test_the_decode_bench_times_its_steps_after_a_full_collection_with_the_heap_frozen(
        tmp_path, monkeypatch):
    """A decode cell's timed steps (20 by default, ~17 ms at batch 1 on a GPU) start after a
    full collection, with every object alive then frozen, as the workload benches' runs do: a
    collection inside them would scan the engine and stretch a step. Read from the collector's
    own counts where the bench reads its clock (its start and its end), and after the run."""
    import gc
    import time as real_time

    from torchlet.bench import micro

    seen = []

    class Clock:
        @staticmethod
        def perf_counter():
            seen.append((gc.get_freeze_count(), gc.get_stats()[2]["collections"]))
            return real_time.perf_counter()

    stepwise = next(v.name for v in implementations.discover() if hasattr(v.package, "build")
                    and v.option_for(MAX_STEP_TOKENS) is not None)
    before = gc.get_stats()[2]["collections"]
    monkeypatch.setattr(micro, "time", Clock)
    assert main(["bench", "decode", "--device", "cpu", "--versions", stepwise, "--batches", "1",
                 "--contexts", "4", "--steps", "2", "--warmup", "1", "--quiet",
                 "--out", str(tmp_path)]) == 0
    assert len(seen) == 2, seen  # the timed steps' start and end
    (frozen_at_start, collections), (frozen_at_end, _) = seen
    assert collections > before, f"no full collection before the timed steps: {seen}"
    assert frozen_at_start > 0 and frozen_at_end > 0, f"the heap not frozen through them: {seen}"
    assert gc.get_freeze_count() == 0, "the heap left frozen after the bench"


def test_a_decode_cell_past_the_models_context_fails_with_its_reason_and_exit_status_1(tmp_path):
    _, stepwise = two_versions()
    assert main(["bench", "decode", "--device", "cpu", "--versions", stepwise, "--batches", "2",
                 "--contexts", str(CPU_MODEL.max_position), "--steps", "2", "--warmup", "1",
                 "--quiet", "--out", str(tmp_path)]) == 1
    [row] = json.loads((tmp_path / "decode.json").read_text())["rows"]
    assert row["error"].startswith(f"TorchletError: context {CPU_MODEL.max_position} + the ")
    assert row["error"].endswith(f"exceed the model's {CPU_MODEL.max_position} positions")


def json_config(path):
    from torchlet.contract import ModelConfig
    return ModelConfig(**json.loads(path.read_text())["model"])


def test_kernel_microbenchmark_feeds_paged_attention_and_sdpa_the_same_data(tmp_path):
    if not any(v.has_kernel(PAGED_DECODE_ATTENTION) for v in implementations.discover()):
        pytest.skip("no version declares a paged decode attention kernel yet")
    assert main(["bench", "kernel", "--device", "cpu", "--batches", "2", "--contexts", "24",
                 "--block-size", "8", "--iters", "1", "--quiet", "--out", str(tmp_path)]) == 0
    [row] = json.loads((tmp_path / "kernel.json").read_text())["rows"]
    assert row["max_abs_diff"] < 1e-4  # float32 on CPU: the two agree, so they read the same K/V
    # K and V once: batch x context x KV heads x head_dim x 4 bytes each, plus q in and out
    c = json_config(tmp_path / "kernel.json")
    assert row["bytes"] == 2 * 4 * 2 * 24 * c.num_kv_heads * c.head_dim + 2 * 4 * 2 * c.num_heads * c.head_dim


def test_a_shared_prefix_workload_starts_every_request_with_the_same_n_tokens():
    plain = cpu_workload(6, seed=3)
    shared = with_shared_prefix(plain, 24, 3, CPU_MODEL.vocab_size, CPU_MODEL.max_position)
    prefix = shared.prompts[0][:24]
    assert all(p[:24] == prefix for p in shared.prompts)
    assert [p[24:] for p in shared.prompts] == list(plain.prompts)  # the requests' own ids stay
    assert shared.output_lens == plain.output_lens and shared.shared_prefix == 24
    assert with_shared_prefix(plain, 24, 3, CPU_MODEL.vocab_size, 2048) == shared  # seeded
    assert with_shared_prefix(plain, 24, 4, CPU_MODEL.vocab_size, 2048).prompts[0][:24] != prefix
    with pytest.raises(TorchletError, match="beyond the model's context of 2048"):
        with_shared_prefix(plain, 2000, 3, CPU_MODEL.vocab_size, 2048)


def test_a_shared_prefix_beyond_the_context_is_one_clear_line(capsys, tmp_path):
    assert main(["bench", "cpu", "--versions", two_versions()[0], "--shared-prefix", "4000",
                 "--quiet", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "--shared-prefix 4000: a request would reach" in err and "Traceback" not in err


def prefix_bench(out, *argv) -> tuple[dict, str]:
    """A tiny `bench cpu` of the first step-API version and the newest one with a prefix cache:
    rows by version, and what it logged."""
    cached = [v.name for v in implementations.discover() if PREFIX_CACHE in v.capabilities][-1]
    log = io.StringIO()
    # One request at a time: requests prefilled in the same step would each compute the prefix.
    # TRITON_INTERPRET=0 runs inherited Triton kernels on their PyTorch path (the interpreter is
    # for the kernels' own specs and would cost seconds here).
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(log):
        mp.setenv("TRITON_INTERPRET", "0")
        assert main(["bench", "cpu", "--versions", f"{two_versions()[1]},{cached}",
                     "--requests", "3", "--max-running", "1", "--in-process", "--quiet",
                     "--out", str(out), *argv]) == 0
    rows = json.loads((out / "cpu.json").read_text())["rows"]
    return {r["version"]: r for r in rows}, log.getvalue()


@pytest.fixture(scope="module")
def prefix_run(tmp_path_factory):
    return prefix_bench(tmp_path_factory.mktemp("prefix"), "--shared-prefix", "32")


def test_a_prefix_cache_finds_the_shared_prefix_and_the_row_reports_its_hit_rate(prefix_run):
    rows, log = prefix_run
    plain, cached = rows.values()
    assert "error" not in cached, cached
    hit, queried = cached["prefix_hit_tokens"], cached["prefix_queried_tokens"]
    assert 0 < hit <= queried and hit <= 2 * 32  # only the two requests after the first can hit
    assert cached["prefix_hit_rate"] == pytest.approx(hit / queried)
    assert cached["prefix_evictions"] == 0  # the pool is sized for every request at once
    assert f"{cached['version']}: " in log and f"prefix hit rate {hit / queried:.1%}" in log
    # a version without a prefix cache reports none
    assert {k: v for k, v in plain.items() if k.startswith("prefix_")} == {
        "prefix_hit_tokens": None, "prefix_queried_tokens": None, "prefix_evictions": None,
        "prefix_hit_rate": None}


def test_the_report_shows_a_hit_rate_column_only_when_a_row_has_a_prefix_cache(prefix_run,
                                                                                  cpu_run):
    rows, _ = prefix_run
    table = markdown_table("cpu", list(rows.values()))
    assert "| prefix hit rate |" in table.splitlines()[0]
    cached = list(rows.values())[-1]
    assert f"| {cached['prefix_hit_rate']:.1%} |" in table
    out, _ = cpu_run
    plain_rows = json.loads((out / "cpu.json").read_text())["rows"]
    assert "prefix hit rate" not in markdown_table("cpu", plain_rows)


def test_without_a_shared_prefix_the_prefix_cache_finds_nothing(tmp_path):
    """Random prompts share no block, and the warm-up request leaves none they could hit."""
    rows, _ = prefix_bench(tmp_path)
    cached = list(rows.values())[-1]
    assert cached["prefix_queried_tokens"] > 0 and cached["prefix_hit_tokens"] == 0



def test_bench_batching_times_the_same_requests_one_after_another_then_at_once(tmp_path):
    """`bench batching` against a server of a tiny checkpoint: one row, its ratio the seconds
    at once over the seconds one after another, the answers the same both ways (greedy), the
    command recorded, and the doc's section shows both."""
    from spec.support.models.hf_dirs import save_tiny
    from torchlet.bench.doc import section

    model, out = tmp_path / "model", tmp_path / "out"
    save_tiny(model, "llama", tokenizer=True, seed=5, printable=True)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["bench", "batching", "--device", "cpu", "--model", str(model),
                     "--requests", "3", "--tokens", "4", "--out", str(out)]) == 0
    result = json.loads((out / "batching.json").read_text())
    [row] = result["rows"]
    assert (row["requests"], row["tokens"], row["same_answers"]) == (3, 4, True)
    assert row["ratio"] == pytest.approx(row["concurrent_s"] / row["sequential_s"])
    assert result["command"].startswith("torchlet bench batching ")
    assert "--requests 3" in result["command"] and "--tokens 4" in result["command"]
    text = "\n".join(section("batching", result, "benchmarks"))
    assert result["command"] in text and f"{row['ratio']:.3f}" in text
    assert (out / "batching.png").stat().st_size > 0


@pytest.fixture(scope="module")
def main_job_run(tmp_path_factory):
    """`bench main-job` on a tiny checkpoint saved by Hugging Face, with its tokenizer: the
    result file and the printed table."""
    from spec.support.models.hf_dirs import save_tiny

    model, out = tmp_path_factory.mktemp("chat"), tmp_path_factory.mktemp("main-job")
    save_tiny(model, "qwen2", tokenizer=True, seed=3)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        assert main(["bench", "main-job", "--model", str(model), "--rounds", "1",
                     "--max-new-tokens", "4", "--quiet", "--out", str(out)]) == 0
    return json.loads((out / "main-job.json").read_text()), printed.getvalue()


def test_main_job_times_hf_and_the_default_version_on_the_same_greedy_tokens(main_job_run):
    from torchlet.running import default_version

    result, table = main_job_run
    default = default_version(implementations.discover(), "cpu").name
    assert result["workload"]["default_version"] == default
    hf, mine = result["rows"]
    assert (hf["version"], mine["version"]) == ("HF transformers generate", default)
    assert "error" not in hf and "error" not in mine, result["rows"]
    assert hf["output_tokens"] == mine["output_tokens"] == len(hf["token_ids"]) == 4
    assert mine["token_ids"] == hf["token_ids"] and mine["same_ids_as_hf"] is True
    assert mine["vs_hf"] == pytest.approx(mine["tok_s_median"] / hf["tok_s_median"])
    assert len(mine["tok_s"]) == 1 and mine["tok_s_median"] == mine["tok_s"][0]  # one round
    assert result["command"].startswith("torchlet bench main-job --out ")
    assert "--rounds 1" in result["command"] and "--max-new-tokens 4" in result["command"]
    for row in (hf, mine):
        assert f"{row['vs_hf']:.2f}" in table.splitlines()[2 + result["rows"].index(row)]


def test_main_job_refuses_zero_rounds_in_one_line(capsys):
    assert main(["bench", "main-job", "--rounds", "0", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "torchlet: error: --rounds must be at least 1, got 0"


def test_the_report_shows_the_main_job_with_its_command_and_the_cpu_target(main_job_run,
                                                                           tmp_path):
    result, _ = main_job_run
    results = tmp_path / "results"
    results.mkdir()
    (results / "main-job.json").write_text(json.dumps(result))
    doc = tmp_path / "docs" / "benchmarks.md"
    assert main(["bench", "report", "--results", str(results), "--doc", str(doc)]) == 0
    text = doc.read_text()
    mine = result["rows"][1]
    assert result["command"] in text and f"| {mine['tok_s_median']:.1f} |" in text
    assert f"The default version ({mine['version']}) ≥ 1.5x HF generate's tokens/s: **" in text


@given(spans=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=12))
def test_the_gpus_busy_time_counts_kernels_that_overlap_once(spans):
    """GPU ms/step is the time at least one kernel ran: the union of the profiler's (start, end)
    spans, each instant once, since kernels launched dependent overlap the one before them
    (v13's one-row kernels on Hopper) and their summed times can pass the step's wall time.
    Against a timeline of unit cells: a cell is busy when some span covers it."""
    from torchlet.bench.micro import busy_us

    spans = [(start, start + length) for start, length in spans]
    covered = {t for start, end in spans for t in range(start, end)}
    assert busy_us(spans) == len(covered)
    assert busy_us([(float(a), float(b)) for a, b in reversed(spans)]) == len(covered)


def test_the_decode_targets_judge_the_newest_version_of_the_run():
    from torchlet.bench.targets import decode_lines

    def row(version, batch, context, ms, gpu_ms):
        return {"version": version, "batch": batch, "context": context, "ms_per_step": ms,
                "gpu_ms_per_step": gpu_ms, "host_ms_per_step": ms - gpu_ms,
                "kernels_per_step": 250}
    result = {"environment": {"gpu": "NVIDIA H200"}, "rows": [
        row("v13_fused", 1, 128, 1.4, 0.9), row("v13_fused", 256, 1024, 4.0, 2.0),
        row("v14_overlap", 1, 128, 0.7, 0.65), row("v14_overlap", 256, 1024, 2.5, 2.4),
        row("v13_fused", 1, 64, 1.3, 0.9)]}  # a smaller context of an older version
    text = "\n".join(decode_lines(result))
    assert "batch-1 decode step (v14_overlap, context 128): **met**, 0.7 ms" in text
    assert "batch 256, context 1024: **met**, 96%" in text
    assert "decode step at batch 256, context 1024: **missed** by 0.5 ms" in text


def test_issue_48s_targets_judge_one_call_kernels_v15s_itl_maximum_and_the_qwen3_workload():
    """The kernel one call a replay at 80% of the bound at each of its two cells, SDPA beside;
    v15's largest inter-token gap over its p99 (not another version's, not the p50); the Qwen3
    workload's share of its own floor, from the newest version of its run. Not measured where
    a result is missing or from a CPU."""
    from torchlet.bench.targets import mixed_lines, one_call_lines, qwen3_lines

    gpu = {"environment": {"gpu": "NVIDIA H200"}}
    cell = {"batch": 256, "context": 1024, "paged_pct_bound": 81.0, "sdpa_pct_bound": 85.0,
            "ratio": 0.95}
    text = "\n".join(one_call_lines({**gpu, "rows": [cell, {**cell, "batch": 64,
                                                              "context": 4096,
                                                              "paged_pct_bound": 60.0}]}))
    assert "B=256, context 1024, one call a replay: **met**, 81%" in text
    assert "B=64, context 4096, one call a replay: **missed** by 20.0 percentage points" in text
    assert "SDPA on contiguous K/V, the same way: 85.0%" in text
    assert "not measured" in "\n".join(one_call_lines({**gpu, "rows": [cell]}))
    rows = [{"version": "v14_overlap", "itl_p50_ms": 1.0, "itl_p99_ms": 30.0, "itl_max_ms": 31.0},
            {"version": "v15_chunked_prefill", "itl_p50_ms": 4.0, "itl_p99_ms": 7.0,
             "itl_max_ms": 15.4}]
    text = "\n".join(mixed_lines({**gpu, "rows": rows}))
    assert "over its p99: **missed** by 0.2x: 2.2x against ≤ 2x" in text
    assert "Maximum 15.40 ms, p99 7.00 ms" in text
    assert "not measured" in "\n".join(mixed_lines({"environment": {}, "rows": rows}))
    qwen3 = {**gpu, "floor": {"seconds": 3.0}, "rows": [
        {"version": "v19_structured_output", "wall_s": 3.9, "pct_floor": 76.9},
        {"version": "v20_live_lanes", "wall_s": 5.0, "pct_floor": 60.0}]}
    text = "\n".join(qwen3_lines(qwen3))
    assert "share of its floor: **missed** by 15.0 percentage points: 60% against ≥ 75%" in text
    assert "v20_live_lanes: 5.00 s against a floor of 3.000 s" in text
    assert "not measured" in "\n".join(qwen3_lines(None))


def test_the_kernel_target_judges_the_chained_figure_and_states_the_single_calls_beside_it():
    """A row timed in a chain (data over twice L2) is judged by it; a row without one, by its
    one-call figure."""
    from torchlet.bench.targets import kernel_lines

    single = {"batch": 64, "context": 4096, "paged_pct_bound": 58.2, "sdpa_pct_bound": 62.8,
              "sdpa_gb_s": 2700.0, "ratio": 0.93}
    chained = {**single, "chain_calls": 20, "paged_chain_pct_bound": 71.5,
               "sdpa_chain_pct_bound": 66.0}
    gpu = {"environment": {"gpu": "NVIDIA H200"}}
    text = "\n".join(kernel_lines({**gpu, "rows": [chained]}))
    assert "20 calls to a graph: **met**, 71.5%" in text
    assert "One call a replay, L2 flushed before it (a graph launch's cost included): 58.2%" in text
    assert "timed the same way: 66.0%" in text
    assert "% of bandwidth: **missed**" in "\n".join(kernel_lines({**gpu, "rows": [single]}))


def test_a_result_names_the_commit_the_sender_gives_over_the_trees_own(monkeypatch):
    from torchlet.bench.report import environment

    assert environment("cpu")["commit"]  # this checkout's, from git
    monkeypatch.setenv("TORCHLET_COMMIT", "b92a54a")
    assert environment("cpu")["commit"] == "b92a54a"


def test_mixed_traffic_reports_each_versions_inter_token_latency_and_long_prompts_first_tokens(
        tmp_path):
    """A tiny mixed run on the CPU: both versions' rows carry ITL and TTFT percentiles, and the
    chunked-prefill version ran with the budget asked for, the other with room for a whole prompt,
    so it computed the long prompts in fewer steps."""
    out = tmp_path / "mixed"
    assert main(["bench", "mixed", "--device", "cpu", "--versions", "v14,v15", "--decoders", "2",
                 "--short-len", "8", "--decode-tokens", "16", "--long-prompts", "2",
                 "--long-len", "48", "--every", "3", "--budget", "8", "--quiet",
                 "--out", str(out)]) == 0
    # On a CPU the run has its own section in the doc: mixed-cpu.json, beside the GPU's mixed.json.
    rows = {r["version"]: r for r in json.loads((out / "mixed-cpu.json").read_text())["rows"]}
    v14, v15 = rows["v14_overlap"], rows["v15_chunked_prefill"]
    assert (v14["budget"], v15["budget"]) == (48 + 2 + 2, 8)
    for row in rows.values():
        assert row["itl_p50_ms"] <= row["itl_p99_ms"] <= row["itl_max_ms"]
        assert row["ttft_p50_ms"] > 0 and row["output_tokens"] == 2 * 16 + 2 * 4
    assert v15["steps"] > v14["steps"]


MIXED_TINY = ["--device", "cpu", "--versions", "v14,v15", "--decoders", "2", "--short-len", "8",
              "--decode-tokens", "4", "--long-prompts", "1", "--long-len", "16", "--every", "2",
              "--budget", "8", "--quiet"]


def test_mixed_times_each_version_after_a_full_collection_with_the_heap_frozen(tmp_path,
                                                                               monkeypatch):
    """Each version's timed run starts after a full garbage collection made since its warm-up
    ended, with the objects alive then frozen through it (a full collection during the run
    scans only what the run made: one over the earlier version's objects stalled a step for
    ~110 ms); the next version warms up unfrozen, and nothing is frozen afterwards. Read from
    the collector's own counts around each of the bench's drives. (gc.unfreeze thaws every
    frozen object, the suite's own from conftest.py too: the counts here are the process's.)"""
    import gc

    from torchlet.bench import mixed

    drive, seen = mixed.drive, []

    def counted(*args, **kwargs):
        seen.append((gc.get_freeze_count(), gc.get_stats()[2]["collections"]))
        out = drive(*args, **kwargs)
        seen.append((gc.get_freeze_count(), gc.get_stats()[2]["collections"]))
        return out

    monkeypatch.setattr(mixed, "drive", counted)
    assert main(["bench", "mixed", *MIXED_TINY, "--out", str(tmp_path)]) == 0
    assert len(seen) == 8, seen  # two versions: a warm-up and a timed run each, start and end
    for version in range(2):
        warm_start, warm_end, timed_start, timed_end = seen[4 * version:4 * version + 4]
        assert timed_start[1] > warm_end[1], f"no full collection before the timed run: {seen}"
        # the engine and the warm-up's survivors frozen at the start, still frozen at the end (a
        # frozen object freed on the way leaves the count)
        assert timed_start[0] > warm_end[0] and timed_end[0] > 0, seen
    assert seen[4][0] == seen[5][0] == 0, f"the second version warmed up frozen: {seen}"
    assert gc.get_freeze_count() == 0


def test_a_workload_bench_times_each_version_after_a_full_collection_with_the_heap_frozen(
        tmp_path, monkeypatch):
    """bench cpu in one process (as gpu-workload runs each version, through run_job): each
    version's timed run, streamed or stepped, starts after a full collection made since its
    warm-up ended, with the objects alive then frozen through it; nothing is frozen after. Read
    from the collector's own counts around the warm-up and the timed run."""
    import gc

    from torchlet.bench import run

    seen = []

    def counted(fn, label):
        def watched(*args, **kwargs):
            seen.append((label, "start", gc.get_freeze_count(), gc.get_stats()[2]["collections"]))
            out = fn(*args, **kwargs)
            seen.append((label, "end", gc.get_freeze_count(), gc.get_stats()[2]["collections"]))
            return out
        return watched

    for name in ("warm_up", "run_steps", "run_stream"):
        monkeypatch.setattr(run, name, counted(getattr(run, name), name))
    assert main(["bench", "cpu", "--versions", ",".join(two_versions()), "--requests", "2",
                 "--in-process", "--quiet", "--out", str(tmp_path)]) == 0
    assert [(label, when) for label, when, *_ in seen] == [
        ("warm_up", "start"), ("warm_up", "end"), ("run_stream", "start"), ("run_stream", "end"),
        ("warm_up", "start"), ("warm_up", "end"), ("run_steps", "start"), ("run_steps", "end")]
    for version in range(2):
        _, warm_end, timed_start, timed_end = seen[4 * version:4 * version + 4]
        assert timed_start[3] > warm_end[3], f"no full collection before the timed run: {seen}"
        assert timed_start[2] > warm_end[2] and timed_end[2] > 0, seen
    assert gc.get_freeze_count() == 0


def test_tp_reports_each_ranks_bytes_and_the_step_of_rank_0(tmp_path):
    """TP=1 only here (a rank is a process; v16's page runs 2 ranks and reads shards
    there): one row, the model's weights and its K/V pool, and a step time."""
    out = tmp_path / "tp"
    assert main(["bench", "tp", "--device", "cpu", "--tensor-parallel", "1", "--batch", "2",
                 "--context", "8", "--steps", "3", "--quiet", "--out", str(out)]) == 0
    rows = json.loads((out / "tp.json").read_text())["rows"]
    assert [(r["tensor_parallel"], r["rank"]) for r in rows] == [(1, 0)]
    assert rows[0]["weights_mib"] > rows[0]["kv_mib"] > 0 and rows[0]["step_ms"] > 0


def test_a_sharded_random_model_draws_on_each_rank_only_the_part_it_holds():
    """Cut by the tensor-parallel version's own sharding, each of 2 ranks' slab checkpoint holds
    the tensors (names, shapes) that cutting the whole random model gives, each a drawn tensor;
    nothing as big as the whole embedding is ever made; and the bytes planned for the rank are
    its tensors' bytes."""
    from spec.support.watchers.allocations import OpLog
    from torchlet.bench.sharded import planned_bytes, slab_checkpoint
    from torchlet.bench.workloads import random_checkpoint
    from torchlet.contract import TENSOR_PARALLEL

    version = [v for v in implementations.discover(implementations.REFERENCE_ROOT)
               if TENSOR_PARALLEL in v.capabilities][-1]
    cut, shard_of = version.package.shard_checkpoint, version.package.Shard.of
    whole = random_checkpoint(CPU_MODEL)
    plans = planned_bytes(version, CPU_MODEL, 2, torch.float32, kv_tokens=0)
    for rank in range(2):
        shard = shard_of(CPU_MODEL, rank, 2)
        with OpLog() as log:
            mine = cut(slab_checkpoint(CPU_MODEL, 0, "cpu", torch.float32), shard).tensors
        expected = cut(whole, shard).tensors
        assert {n: t.shape for n, t in mine.items()} == {n: t.shape for n, t in expected.items()}
        assert all(isinstance(t, torch.Tensor) and t.isfinite().all() for t in mine.values())
        made = max(torch.Size(shape).numel() for op in log.ops for shape, _ in op.fresh)
        assert made < whole.tensors["model.embed_tokens.weight"].numel()
        assert plans[rank]["weights"] == sum(t.numel() * 4 for t in mine.values())


@pytest.fixture(scope="module")
def speculative_model(tmp_path_factory):
    """A tiny printable Llama of 2 layers with the byte tokenizer (its answers repeat
    themselves, so prompt lookup has guesses to check), context 512 for the copy prompts."""
    from spec.support.models.hf_dirs import save_tiny

    model = tmp_path_factory.mktemp("chat")
    save_tiny(model, "llama", tokenizer=True, seed=5, printable=True,
              max_position_embeddings=512)
    return model


def bench_speculative(model, out, *flags):
    """`bench speculative` on the model: the result file, the printed table and check, and
    the exit status."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()):
        code = main(["bench", "speculative", "--model", str(model), "--device", "cpu",
                     "--threads", "1", "--max-new-tokens", "8", "--quiet", "--out", str(out),
                     *flags])
    return json.loads((out / "speculative.json").read_text()), printed.getvalue(), code


@pytest.fixture(scope="module")
def speculative_run(tmp_path_factory, speculative_model):
    return bench_speculative(speculative_model, tmp_path_factory.mktemp("speculative"),
                             "--batches", "1,2", "--ks", "0,2")


def test_bench_speculative_prints_a_row_for_each_k_and_acceptance_and_exact_keeps_k0s_tokens(
        speculative_run):
    """Per workload and batch: k=0 (guessing nothing), then k=2 with each acceptance; every row
    makes its tokens, the k=2 rows through verifying passes, and the check under the table
    finds every exact row's tokens equal to k=0's."""
    result, printed, code = speculative_run
    rows = result["rows"]
    cells = [(w, b) for w in ("copy", "chat") for b in (1, 2)]
    assert [(r["workload"], r["batch"], r["k"], r["acceptance"]) for r in rows] == [
        (w, b, k, a) for w, b in cells for k, a in ((0, None), (2, "exact"), (2, "rejection"))]
    lines = printed.splitlines()
    for row, line in zip(rows, lines[2:2 + len(rows)]):
        assert line.split()[:4] == [row["workload"], str(row["batch"]), str(row["k"]),
                                    row["acceptance"] or "-"]
        assert line.split()[-3:] == [str(row["same_as_k0"]), "/", str(row["of_k0"])]
    for row in rows:
        assert row["output_tokens"] == row["of_k0"] == 8 * row["batch"]
        stats = row["speculation"]
        if row["k"]:
            assert stats["verify_passes"] > 0 and stats["proposed"] > 0
            assert row["tokens_per_pass"] == stats["tokens"] / stats["verify_passes"]
        else:
            assert stats["verify_passes"] == 0 and row["speedup"] == 1.0
    exact = [r for r in rows if r["acceptance"] == "exact"]
    assert all(r["same_as_k0"] == r["of_k0"] for r in exact)
    total = sum(r["of_k0"] for r in exact)
    assert lines[-1] == (f"exact acceptance: {total} of {total} generated tokens equal the k=0 "
                         f"run's (4 rows): all equal") and code == 0
    assert result["command"].startswith("torchlet bench speculative --model ")


def test_bench_speculative_prints_rows_for_each_proposer_and_checks_every_exact_row(
        tmp_path, speculative_model):
    """--proposers ngram,self:1: after k=0, each proposer at k=2 with each acceptance, the
    proposer in its column; the self-draft's rows guess through its passes, and the check under
    the table counts the exact rows of both proposers."""
    result, printed, code = bench_speculative(speculative_model, tmp_path, "--batches", "1",
                                              "--ks", "0,2", "--proposers", "ngram,self:1")
    rows = result["rows"]
    assert [(r["workload"], r["k"], r["acceptance"], r["proposer"]) for r in rows] == [
        (w, k, a, p) for w in ("copy", "chat")
        for k, a, p in ((0, None, None), (2, "exact", "ngram"), (2, "rejection", "ngram"),
                        (2, "exact", "self:1"), (2, "rejection", "self:1"))]
    lines = printed.splitlines()
    assert lines[0].split()[:5] == ["workload", "batch", "k", "acceptance", "proposer"]
    for row, line in zip(rows, lines[2:2 + len(rows)]):
        assert line.split()[3:5] == [row["acceptance"] or "-", row["proposer"] or "-"]
    drafted = [r for r in rows if r["proposer"] == "self:1"]
    assert all(r["speculation"]["proposed"] > 0 and r["output_tokens"] == 8 for r in drafted)
    total = sum(r["of_k0"] for r in rows if r["acceptance"] == "exact")
    assert lines[-1] == (f"exact acceptance: {total} of {total} generated tokens equal the k=0 "
                         f"run's (4 rows): all equal") and code == 0
    assert " --proposers ngram,self:1 " in result["command"]
    # the doc's words on the self-draft, from its exact rows (none on ngram)
    rates = [f"{r['acceptance_rate']:.1%}" for r in drafted if r["acceptance"] == "exact"]
    assert result["notes"] == [f"Proposer self:1, exact acceptance: copy batch 1 k=2: {rates[0]} "
                               f"of its guesses accepted, {drafted[0]['speedup']:.2f}x k=0's "
                               f"tok/s; chat batch 1 k=2: {rates[1]} of its guesses accepted, "
                               f"{drafted[2]['speedup']:.2f}x k=0's tok/s."]


def test_bench_speculative_refuses_batch_invariant_on_a_cpu_in_one_line(capsys):
    """Its engines run a CPU's PyTorch path, where batch_invariant cannot run: refused before
    any model loads, in one line."""
    code = main(["bench", "speculative", "--device", "cpu", "--batch-invariant", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err == ("torchlet: error: --batch-invariant runs on the Triton kernels, "
                                 "which bench speculative runs on a GPU only: add --device cuda")


def test_the_speculative_check_shows_an_exact_row_that_changed_a_token():
    from torchlet.bench.speculative import check_lines

    rows = [{"acceptance": None, "same_as_k0": 8, "of_k0": 8},
            {"acceptance": "exact", "same_as_k0": 7, "of_k0": 8},
            {"acceptance": "rejection", "same_as_k0": 5, "of_k0": 8}]
    assert check_lines(rows) == (["exact acceptance: 7 of 8 generated tokens equal the k=0 run's "
                                  "(1 row): MISMATCH"], False)
