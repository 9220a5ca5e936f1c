"""`--quantize int8|int4` on generate, chat and serve: v18 holds the weights as integers made at
load, and on a CPU a quantized model (--quantize, or a GGUF file such as the default model) runs
on the version that reads them unless --impl names another.

What it checks: with --quantize and no --impl, generate runs the newest version that reads the
integers (v18 and later) and its banner says how the weights are held and why that version was
chosen; the answer is that version's own with the same flag named; a version without the capability, named with --impl, is refused in one line before the
model loads (also for chat and serve); --quantize with --tensor-parallel is refused in one line.
Files: torchlet/running.py (default_version, quantize_options, weights_label)."""
from __future__ import annotations

import pytest

import implementations
from spec.support.models.hf_dirs import ascii_chat_dir
from spec.test_cli import TINY, assert_one_line, run
from torchlet.contract import QUANTIZED_WEIGHTS


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return ascii_chat_dir(tmp_path_factory.mktemp("quantize_model"))


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_quantize_picks_the_version_that_reads_the_integers_and_says_so(capsys, model, fmt):
    code, out, err = run(capsys, "generate", "Hello", "--model", str(model), "--quantize", fmt,
                         "--max-new-tokens", "12")
    assert code == 0, err
    newest = [v for v in implementations.discover() if QUANTIZED_WEIGHTS in v.capabilities][-1]
    banner = err.splitlines()[0]
    assert banner.startswith(f"[{newest.name} on cpu"), banner
    assert f"weights {fmt}, quantized at load (chosen for them" in banner, banner
    code, named, err = run(capsys, "generate", "Hello", "--model", str(model), "--quantize", fmt,
                           "--max-new-tokens", "12", "--impl", newest.name)
    assert code == 0 and named == out and out.strip(), err


@pytest.mark.parametrize("command", ["generate", "chat", "serve"])
def test_a_version_of_float_weights_is_refused_in_one_line(capsys, command):
    prompt = ["hi"] if command == "generate" else []
    code, out, err = run(capsys, command, *prompt, "--impl", "v17", "--model", str(TINY),
                         "--quantize", "int8")
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert "--quantize int8 needs a version with the quantized_weights capability" in line
    assert out == ""


def test_quantize_with_tensor_parallel_is_refused_in_one_line(capsys):
    code, out, err = run(capsys, "generate", "hi", "--model", str(TINY), "--quantize", "int8",
                         "--tensor-parallel", "2")
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert "quantized weights are not split across ranks" in line and out == ""
