"""`torchlet bench anchors`: what a decode step could cost, measured beside what it costs.

What it introduces: three anchors per cell of batch x context: the step's matmuls alone
(cuBLAS, one CUDA graph), a plain-PyTorch static-cache step in the style of gpt-fast (compiled,
one CUDA graph) and the floor (bytes over bandwidth); `bench decode --anchors` puts them beside
a version's row, and `bench gpu-workload` beside its table, with `--repeats` runs per version.

Why the versions need it: a version's step time says little alone. Against the matmuls it
cannot avoid and a short plain-PyTorch step on the same shapes, it says what is left to win.

Core principle: an anchor must compute the right thing, or it anchors nothing. The static step's
greedy tokens are Hugging Face's float64 model's, request by request in one batch of different
lengths; the matmuls anchor dispatches exactly the static step's GEMMs; the floor is counted
from the checkpoint's tensors. No timing is asserted.

Files to compare: torchlet/bench/static_step.py (the step), torchlet/bench/anchors.py (timing
it), torchlet/bench/floor.py (step_bytes).

Tradeoff left visible: the step decodes every request at one position again and again, so the
cache never grows past context + 1 (rounded up to 16); its cost is a real step's, its tokens
after the first are not a real continuation. The CPU runs it eagerly: a check, not a figure.
"""
from __future__ import annotations

import json

import pytest
import torch

from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.oracle import greedy, hf_model
from torchlet.bench.static_step import StaticModel
from torchlet.cli import main

PROMPTS = ([5, 77, 200, 12, 9], [3, 4, 100, 250, 31, 8, 44, 2], [17, 60])
NEW_TOKENS = 5


@pytest.mark.parametrize("fixture", ["tiny_qwen2", "tiny_qwen3", "tiny_gqa5"])
def test_the_static_cache_step_decodes_hugging_faces_greedy_tokens(fixture):
    """Three prompts of different lengths prefilled into their cache rows, then decoded together,
    each at its own position: q/k/v bias, per-head q/k norms and a group of 5 query heads."""
    checkpoint = tiny_checkpoint(fixture)
    oracle = hf_model(checkpoint, torch.float64)
    expected = [greedy(oracle, p, NEW_TOKENS).tokens for p in PROMPTS]
    model = StaticModel(checkpoint, len(PROMPTS), 32, "cpu", torch.float64)
    with torch.inference_mode():
        tokens = torch.tensor([model.prefill(row, p) for row, p in enumerate(PROMPTS)])
        positions = torch.tensor([len(p) for p in PROMPTS])
        got = [tokens]
        for _ in range(NEW_TOKENS - 1):
            tokens = model.step(tokens, positions)
            positions = positions + 1
            got.append(tokens)
    assert torch.stack(got, dim=1).tolist() == expected


def gemm_weights(run) -> list[tuple[int, ...]]:
    """The [out, in] shape of the weight of every matmul `run` dispatches, sorted."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Gemms(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.linear.default:  # on a CPU it reaches the mode whole
                seen.append(tuple(args[1].shape))
            elif func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
                seen.append(tuple(reversed(args[-1].shape)))
            return func(*args, **(kwargs or {}))

    with Gemms(), torch.inference_mode():
        run()
    return sorted(seen)


def test_the_matmuls_anchor_runs_exactly_the_static_steps_gemms():
    checkpoint = tiny_checkpoint("tiny_qwen2")
    model = StaticModel(checkpoint, 2, 32, "cpu", torch.float32)
    step = gemm_weights(lambda: model.step(torch.tensor([3, 4]), torch.tensor([5, 9])))
    assert gemm_weights(model.matmuls()) == step
    assert len(step) == 4 * checkpoint.config.num_layers + 1  # q/k/v, o, gate/up, down; LM head


@pytest.fixture(scope="module")
def anchors_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("anchors")
    assert main(["bench", "anchors", "--device", "cpu", "--batches", "1,3", "--contexts", "8",
                 "--steps", "1", "--warmup", "1", "--out", str(out)]) == 0
    return out, json.loads((out / "anchors.json").read_text())


def test_bench_anchors_writes_a_row_per_cell_with_the_floor_counted_from_the_tensors(anchors_run):
    from torchlet.bench.floor import H200_BANDWIDTH
    from torchlet.bench.workloads import CPU_MODEL, random_checkpoint

    _, result = anchors_run
    assert result["kind"] == "anchors" and "--batches 1,3" in result["command"]
    tensors = random_checkpoint(CPU_MODEL).tensors.values()
    weights = sum(t.numel() * 4 for t in tensors)  # float32 on the CPU, tied head counted once
    per_token = 2 * CPU_MODEL.num_layers * CPU_MODEL.num_kv_heads * CPU_MODEL.head_dim * 4
    assert [(r["batch"], r["context"]) for r in result["rows"]] == [(1, 8), (3, 8)]
    for row in result["rows"]:
        assert "error" not in row, row
        assert row["static_timed"] == "eager" and row["matmuls_ms"] > 0 and row["static_ms"] > 0
        assert row["gemms_per_step"] == 4 * CPU_MODEL.num_layers + 1
        assert row["bytes_per_step"] == weights + row["batch"] * 8 * per_token
        assert row["floor_ms"] == pytest.approx(1e3 * row["bytes_per_step"] / H200_BANDWIDTH)


def test_the_report_gives_the_anchors_their_section_with_their_command(anchors_run, tmp_path):
    out, result = anchors_run
    doc = tmp_path / "docs" / "benchmarks.md"
    assert main(["bench", "report", "--results", str(out), "--doc", str(doc)]) == 0
    section = doc.read_text().split("## Anchors of a decode step")[1].split("\n## ")[0]
    assert result["command"] in section
    for row in result["rows"]:
        assert f"| {row['batch']} | 8 | {row['matmuls_ms']:.3f} |" in section


def test_decode_on_a_cpu_adds_the_anchor_columns_only_when_asked(tmp_path):
    import implementations
    from torchlet.contract import MAX_STEP_TOKENS

    stepwise = next(v.name for v in implementations.discover() if hasattr(v.package, "build")
                    and v.option_for(MAX_STEP_TOKENS) is not None)
    rows = {}
    for flag in ("--anchors", "--no-anchors"):
        out = tmp_path / flag
        assert main(["bench", "decode", "--device", "cpu", "--versions", stepwise, "--batches",
                     "2", "--contexts", "8", "--steps", "1", "--warmup", "1", flag, "--quiet",
                     "--out", str(out)]) == 0
        result = json.loads((out / "decode.json").read_text())
        assert result["command"].endswith(flag)
        [rows[flag]] = result["rows"]
    assert rows["--anchors"]["static_ms"] > 0 and rows["--anchors"]["floor_ms"] > 0
    assert not {"matmuls_ms", "static_ms", "floor_ms"} & set(rows["--no-anchors"])


def test_repeated_workload_runs_report_the_median_run_and_every_runs_wall_time():
    from torchlet.bench.run import median_runs
    from torchlet.bench.report import markdown_table

    runs = [{"version": "v1", "wall_s": w, "run": i} for i, w in enumerate((3.0, 2.0, 2.5))]
    runs.insert(1, {"version": "v2", "error": "RuntimeError: out of memory"})
    rows = median_runs(runs)
    assert rows[0] == {"version": "v1", "wall_s": 2.5, "run": 2, "wall_s_runs": [3.0, 2.0, 2.5],
                       "failed_runs": 0}
    assert rows[1] == runs[1]
    assert "| 2.50 | 3.00, 2.00, 2.50 |" in markdown_table("gpu-workload", rows)


def test_zero_repeats_is_one_clear_line(capsys):
    assert main(["bench", "gpu-workload", "--device", "cpu", "--repeats", "0", "--quiet"]) == 1
    assert capsys.readouterr().err.strip() == "torchlet: error: --repeats must be at least 1, got 0"


@pytest.mark.gpu
def test_on_cuda_the_compiled_captured_step_gives_the_eager_steps_logits():
    from torchlet.bench.anchors import capture

    checkpoint = tiny_checkpoint("tiny_qwen2")
    eager, compiled = (StaticModel(checkpoint, 3, 32, "cuda", torch.float32) for _ in range(2))
    compiled.compile("default")
    tokens = torch.tensor([[5], [77], [200]], device="cuda")
    positions = torch.tensor([[0], [3], [7]], device="cuda")
    with torch.inference_mode():
        logits = torch.empty(3, checkpoint.config.vocab_size, device="cuda")
        replay = capture(lambda: logits.copy_(compiled.forward(tokens, positions)))
        replay()
        torch.testing.assert_close(logits, eager.forward(tokens, positions), rtol=1e-4,
                                   atol=1e-4)


def test_the_workloads_anchor_cell_is_its_average_decode_step():
    """Requests decoding per decode pass and the context each attends over, counted here from
    the lengths: a decode row per output token but the first, a pass per token of the longest."""
    from torchlet.bench.anchors import workload_cell
    from torchlet.bench.workloads import QWEN25_05B, nano_vllm_workload

    w = nano_vllm_workload()
    rows = sum(n - 1 for n in w.output_lens)
    contexts = sum(len(p) + t for p, n in zip(w.prompts, w.output_lens) for t in range(1, n))
    assert workload_cell(w, QWEN25_05B) == (round(rows / (max(w.output_lens) - 1)),
                                            round(contexts / rows)) == (131, 903)


@pytest.mark.gpu
def test_on_cuda_the_anchors_run_compiled_and_captured_as_their_table_says(tmp_path):
    assert main(["bench", "anchors", "--device", "cuda", "--model-shape", "cpu", "--batches",
                 "2", "--contexts", "32", "--steps", "2", "--warmup", "1",
                 "--out", str(tmp_path)]) == 0
    [row] = json.loads((tmp_path / "anchors.json").read_text())["rows"]
    assert row["static_timed"] == "compile (default) + graph" and "static_note" not in row, row
    assert row["static_kernels"] > 0 and row["matmuls_gpu_ms"] > 0
