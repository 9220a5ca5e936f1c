"""Page contract: `torchlet generate "PROMPT"`, the main job, answers a chat message end to end.

What it shows: the harness side of every version. The command finds the default model (the
SmolLM2 GGUF, converted once), or a Hugging Face directory given with --model, wraps the prompt
in the model's chat template, runs a version's engine through the contract's `stream`, and
prints the answer as the tokens come, then tokens/s.

Core principle: implementations see token ids only; text, tokenizers and checkpoint formats stay
in the harness (torchlet/cli.py, torchlet/text.py, torchlet/checkpoints.py). The default version
is the fastest measured for the main job: the newest on a GPU; on a CPU the newest without a
paged cache (its gathers cost a CPU more than they save for one request), graph stand-in off.

Files to compare: torchlet/cli.py and torchlet/text.py.

Every failure a user can cause (a bad argument, a missing directory, a prompt that is not UTF-8,
Ctrl-C at any moment, start-up included) ends in one line on stderr and a non-zero exit status,
never a traceback.

Tradeoff left visible: the command mostly runs in-process here (`main(argv)`), so the spec pays
the model load once per worker, not a fresh interpreter per call. The failure cases run it as a
subprocess, as a user does, since what they check (the exit status, stderr, Ctrl-C during the
imports) shows only from outside: about a second each, mostly torch's import.
"""
from __future__ import annotations

import importlib.metadata
import signal
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from spec.support import real_model as rm
from spec.support.hf_dirs import byte_tokenizer, save_tiny
from torchlet import cli
from torchlet.contract import PREFIX_CACHE, SAMPLING
from torchlet.learner import child_env
from torchlet.text import StreamDecoder, load_tokenizer, prompt_ids

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "fixtures" / "tiny_qwen2"  # weights, no tokenizer: a run that gets far fails late
ENTRY = "import sys; from torchlet.cli import main; sys.exit(main())"  # the console script's code


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


def fake(name, triton, paged=False):
    return SimpleNamespace(name=name, uses_triton=triton,
                           capabilities=("generate", "paged_kv") if paged else ("generate",))


def test_the_default_is_the_newest_on_a_gpu_and_the_newest_unpaged_on_a_cpu_without_graphs():
    versions = [fake("v00", False), fake("v07", False), fake("v08", False, paged=True),
                fake("v10", True, paged=True)]
    assert cli.default_version(versions, "cpu").name == "v07"
    assert cli.default_version(versions, "cuda").name == "v10"
    assert cli.default_version(versions[2:], "cpu").name == "v10"  # none unpaged: the newest
    import implementations
    newest = implementations.discover()[-1]
    assert cli.serving_options(newest, "cpu") == {"use_graphs": False, "overlap": False}
    assert cli.serving_options(newest, "cuda") == {}
    mode = cli.run_mode(newest, "cpu", cli.serving_options(newest, "cpu"), interpret=False)
    assert "kernels off" in mode and "graphs off" in mode and "steps in order" in mode
    with cli.kernels_off("cpu", interpret=False):
        assert os.environ["TRITON_INTERPRET"] == "0"  # what TritonDecoder.on_triton reads
    assert os.environ.get("TRITON_INTERPRET") == "1"  # the specs' setting, given back


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


def command(*argv, prelude: str = "", **popen) -> subprocess.Popen:
    """`torchlet ARGV...` in a fresh interpreter, as the console script runs it."""
    return subprocess.Popen([sys.executable, "-c", prelude + ENTRY, *argv], cwd=REPO,
                            env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **popen)


def assert_one_line(code: int, err: bytes, start: str) -> str:
    text = err.decode("utf-8", "replace")
    assert code != 0, text
    assert "Traceback" not in text, text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), text
    return lines[0]


MISTAKES = {
    "a prompt that is not UTF-8": (("generate", b"caf\xe9", "--impl", "v00", "--model", TINY),
                                   "not valid UTF-8"),
    "a missing --impl-root": (("generate", "hi", "--impl-root", "{missing}", "--model", TINY),
                              "--impl-root {missing}: does not exist"),
    "check of a missing tree": (("check", "{missing}"), "learner tree {missing}: does not exist"),
    "diff in a missing --impl-root": (("diff", "v01_0", "--impl-root", "{missing}"),
                                      "--impl-root {missing}: does not exist"),
    "a negative --max-new-tokens": (("generate", "hi", "--impl", "v00", "--model", TINY,
                                     "--max-new-tokens", "-30"), "at least 1, got -30"),
    "--model naming a file": (("generate", "hi", "--impl", "v00", "--model", TINY / "config.json"),
                              "a file, not a directory"),
    "a negative --temperature": (("generate", "hi", "--model", TINY, "--temperature", "-1"),
                                 "--temperature must be a finite number of at least 0"),
    "a --top-p of 0": (("generate", "hi", "--model", TINY, "--temperature", "1", "--top-p", "0"),
                       "--top-p must be a number in (0, 1]"),
}


@pytest.mark.parametrize("mistake", MISTAKES, ids=list(MISTAKES))
def test_each_user_mistake_is_one_clear_line_and_a_failing_exit_status(tmp_path, mistake):
    argv, message = MISTAKES[mistake]
    missing = str(tmp_path / "nope")
    argv = [a.format(missing=missing) if isinstance(a, str) else a for a in argv]
    proc = command(*argv)
    _, err = proc.communicate(timeout=120)
    line = assert_one_line(proc.returncode, err, "torchlet: error")
    assert message.format(missing=missing) in line


# Pauses the child at the first import of MODULE (inside start-up) and tells the parent so on
# stdout; the parent's SIGINT then lands there, at a known point, with no timing involved.
PAUSE = """import os, sys
class PauseAt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.write(1, b"paused\\n")
            os.read(0, 1)
sys.meta_path.insert(0, PauseAt())
"""


@pytest.mark.parametrize("module", ["torch", "torchlet.checkpoints"])
def test_ctrl_c_during_start_up_is_one_line_and_exit_status_130(module):
    proc = command("generate", "hi", "--impl", "v00", "--model", TINY,
                   prelude=PAUSE.format(module=module))
    try:
        assert proc.stdout.readline() == b"paused\n", proc.communicate(timeout=60)[1]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert assert_one_line(proc.returncode, err, "torchlet: interrupted")


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("chat_model")
    save_tiny(path, "qwen2", tokenizer=True, seed=3)
    return path


def test_ctrl_c_during_the_answer_is_one_line_and_exit_status_130(capsys, monkeypatch,
                                                                   chat_model):
    def interrupted(self, token):
        raise KeyboardInterrupt

    monkeypatch.setattr(StreamDecoder, "push", interrupted)
    code, out, err = run(capsys, "generate", "Hello", "--impl", "v00", "--model",
                         str(chat_model), "--max-new-tokens", "8")
    assert code == 130
    assert err.strip().splitlines()[-1] == "torchlet: interrupted" and "Traceback" not in err


def test_a_sampled_answer_is_repeatable_with_a_seed_and_the_banner_says_how_it_ran(capsys,
                                                                                tmp_path):
    """--temperature picks the newest version that samples (none is named), the banner names it
    and the settings, and --seed makes the answer repeatable; another seed answers otherwise."""
    import implementations
    newest_sampler = [v.name for v in implementations.discover()
                      if SAMPLING in v.capabilities][-1]
    save_tiny(tmp_path, "llama", tokenizer=True, seed=3)
    capsys.readouterr()  # saving it shows a progress bar
    base = ("generate", "Hello", "--model", str(tmp_path), "--max-new-tokens", "12",
            "--temperature", "1.5", "--no-chat")
    answers = []
    for seed in ("5", "5", "6"):
        code, out, err = run(capsys, *base, "--seed", seed)
        assert code == 0, err
        assert f"[{newest_sampler} on cpu" in err and "sampling t=1.5" in err
        assert f"seed={seed}" in err
        answers.append(out)
    assert answers[0] == answers[1] != answers[2]


def test_a_greedy_version_asked_to_sample_is_one_clear_line(capsys, tmp_path):
    save_tiny(tmp_path, "llama", tokenizer=True, seed=3)
    capsys.readouterr()  # saving it shows a progress bar
    code, out, err = run(capsys, "generate", "hi", "--impl", "v08", "--model", str(tmp_path),
                         "--temperature", "0.5")
    assert code != 0 and "Traceback" not in err and out == ""
    assert err.strip().count("\n") == 0
    assert "v08_paged_gqa_py decodes greedily: --temperature 0.5 needs" in err


def test_stats_prints_the_prefix_cache_line_or_says_there_is_none(capsys, monkeypatch,
                                                                  chat_model):
    """One request finds nothing cached (the engine is new), but the line shows what it
    looked up; a version without the capability says so. Either way the tokens/s line stays."""
    import implementations
    cached = [v.name for v in implementations.discover() if PREFIX_CACHE in v.capabilities][-1]
    # inherited Triton kernels on their PyTorch path: the interpreter would cost seconds here
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    base = ("generate", "Hello", "--model", str(chat_model), "--max-new-tokens", "4", "--stats")
    code, out, err = run(capsys, *base, "--impl", cached)
    assert code == 0, err
    prompt = len(prompt_ids(load_tokenizer(chat_model), "Hello"))
    assert "tokens/s" in err
    assert err.strip().splitlines()[-1] == (f"[prefix cache: hit rate 0.0%, 0 of {prompt} prompt "
                                            f"tokens cached, 0 evictions]")
    code, out, err = run(capsys, *base, "--impl", "v00")
    assert code == 0, err
    assert "tokens/s" in err
    assert err.strip().splitlines()[-1] == "[v00_full_recompute has no prefix cache]"

