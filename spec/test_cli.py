"""Page contract: `torchlet generate "PROMPT"`, the main job, answers a chat message end to end.

What it shows: the harness side of every version. The command finds the default model (the
SmolLM2 GGUF, converted once), or a Hugging Face directory given with --model, wraps the prompt
in the model's chat template, runs a version's engine through the contract's `stream`, and
prints the answer as the tokens come, then tokens/s.

Core principle: implementations see token ids only; text, tokenizers and checkpoint formats stay
in the harness (torchlet/cli.py, torchlet/text.py, torchlet/checkpoints.py). The default version
is the newest that runs natively here: on a CPU, the newest without Triton kernels.

Files to compare: torchlet/cli.py and torchlet/text.py.

Tradeoff left visible: the command runs in-process here (`main(argv)`), so the spec pays the
model load once per worker, not a fresh interpreter per call.
"""
from __future__ import annotations

import importlib.metadata
from types import SimpleNamespace

import pytest
import torch

from spec.support import real_model as rm
from spec.support.hf_dirs import byte_tokenizer, save_tiny
from torchlet import cli
from torchlet.text import StreamDecoder, load_tokenizer, prompt_ids


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.real_model
def test_generate_answers_the_capital_of_france_with_paris(capsys):
    code, out, err = run(capsys, "generate", "What is the capital of France?",
                         "--max-new-tokens", "16")
    assert code == 0, err
    assert "Paris" in out
    assert "tokens/s" in err


def test_an_unknown_version_is_one_clear_line_and_exit_status_2(capsys):
    code, out, err = run(capsys, "generate", "hi", "--impl", "v99")
    assert code == 2
    assert err.strip().count("\n") == 0
    assert "unknown version 'v99'" in err and "Traceback" not in err


def test_a_missing_model_directory_is_a_clear_error(capsys, tmp_path):
    code, out, err = run(capsys, "generate", "hi", "--impl", "v00",
                         "--model", str(tmp_path / "nope"))
    assert code == 1
    assert "does not exist" in err and "Traceback" not in err


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_model_dir_runs_a_checkpoint_saved_by_hugging_face(capsys, tmp_path, family):
    model = save_tiny(tmp_path, family, tokenizer=True, seed=3)
    tokenizer = load_tokenizer(tmp_path)
    prompt = prompt_ids(tokenizer, "Hello")
    with torch.inference_mode():
        tokens = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False,
                                eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
    expected = tokenizer.decode(tokens[0, len(prompt):], skip_special_tokens=True)
    assert expected.strip(), "the tiny model should say something for this spec to mean anything"

    code, out, err = run(capsys, "generate", "Hello", "--impl", "v00", "--model", str(tmp_path),
                         "--max-new-tokens", "8")
    assert code == 0, err
    assert out == expected + "\n"
    assert "tokens/s" in err


def fake(name, triton):
    return SimpleNamespace(name=name, uses_triton=triton)


def test_the_default_version_on_a_cpu_is_the_newest_without_triton():
    versions = [fake("v00", False), fake("v08", False), fake("v09", True), fake("v10", True)]
    assert cli.default_version(versions, "cpu").name == "v08"
    assert cli.default_version(versions, "cuda").name == "v10"


def test_the_stream_decoder_holds_back_half_a_character():
    tokenizer = byte_tokenizer()
    ids = tokenizer.encode("été à Paris")
    decoder = StreamDecoder(tokenizer)
    pieces = [decoder.push(t) for t in ids]
    assert "".join(pieces) + decoder.flush() == "été à Paris"
    assert pieces[0] == ""  # the first byte of é alone is not text yet


def test_the_stream_decoder_gives_back_bytes_that_never_became_text_at_the_end():
    tokenizer = byte_tokenizer()
    decoder = StreamDecoder(tokenizer)
    text = "".join(decoder.push(t) for t in tokenizer.encode("é")[:1]) + decoder.flush()
    assert text == "\ufffd"


def test_the_torchlet_command_is_installed_as_a_console_script():
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name="torchlet")
    assert entry.load() is cli.main


def test_without_a_subcommand_the_help_is_shown(capsys):
    code, out, err = run(capsys)
    assert code == 2 and "generate" in err


@pytest.mark.real_model
def test_the_chat_template_wraps_the_prompt_of_the_default_model():
    text = rm.tokenizer().decode(list(rm.chat_ids("Hi")))
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
