"""Page contract: `torchlet generate "PROMPT"`, the main job, answers a chat message end to end.

What it shows: the harness side of every version. The command finds the default model (the
SmolLM2 GGUF, converted once), or a Hugging Face directory or .gguf file given with --model,
reads the prompt (an argument, stdin for `-`, or --prompt-file), wraps it in the model's chat
template, runs a version's engine through the contract's `stream` on as many CPU threads as the
load leaves free (--threads sets them; more than the cores gets a warning), and prints the
answer as the tokens come, then tokens/s. An answer gets at most --max-new-tokens, 128 unless
given, capped to what the context leaves after the prompt; one cut at the default or at the
context's end says so in a line, and a --max-new-tokens the context cuts short is noted first.
The first line on stderr, the banner, says how it runs: version, mode, threads, model, prompt
length, and greedy or the sampling settings with their seed, drawn when none was given (or
-1, as llama.cpp's users write it).

Core principle: implementations see token ids only; text, tokenizers and checkpoint formats stay
in the harness (torchlet/generate.py, torchlet/text.py, torchlet/checkpoints.py). The default version
is the fastest measured for the main job: the newest on a GPU; on a CPU the newest without a
paged cache (its gathers cost a CPU more than they save for one request), graph stand-in off.

Files to compare: torchlet/generate.py (the command), torchlet/running.py (device, threads,
which version), torchlet/cli.py (main: the one-line errors) and torchlet/text.py.

Every failure a user can cause (a bad argument, a missing directory, a prompt that is not UTF-8,
a device Torchlet does not run on, Ctrl-C at any moment, start-up included) ends in one line on
stderr and a non-zero exit status, never a traceback; a reader that leaves the pipe early
(`head -2`) ends any command quietly with status 141, as SIGPIPE ends other programs.

Tradeoff left visible: the command mostly runs in-process here (`main(argv)`), so the spec pays
the model load once per worker, not a fresh interpreter per call; main() returns the exit status
and prints the one line, and a traceback would escape it. Only what shows from outside alone runs
as a subprocess, as a user does (argv bytes that are not UTF-8, Ctrl-C during the imports):
a few seconds each, mostly torch's import.
"""
from __future__ import annotations

import importlib.metadata
import io
import os
import re
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from spec.support.models import real_model as rm
from spec.support.models.hf_dirs import byte_tokenizer, hf_model, save_tiny
from torchlet import cli, running
from torchlet.contract import PREFIX_CACHE, SAMPLING, SPECULATIVE
from torchlet.learner import child_env
from torchlet.text import StreamDecoder, load_tokenizer, prompt_ids

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "fixtures" / "tiny_qwen2"  # weights, no tokenizer: a run that gets far fails late
ENTRY = "import sys; from torchlet.cli import main; sys.exit(main())"  # the console script's code


def run(capsys, *argv):
    capsys.readouterr()  # the test's own set-up (a model directory written first) is not the CLI's
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
    assert running.default_version(versions, "cpu").name == "v07"
    assert running.default_version(versions, "cuda").name == "v10"
    assert running.default_version(versions[2:], "cpu").name == "v10"  # none unpaged: the newest
    import implementations
    newest = implementations.discover()[-1]
    assert running.serving_options(newest, "cpu") == {"use_graphs": False, "overlap": False}
    assert running.serving_options(newest, "cuda") == {}
    mode = running.run_mode(newest, "cpu", running.serving_options(newest, "cpu"), interpret=False)
    assert "kernels off" in mode and "graphs off" in mode and "steps in order" in mode
    with running.kernels_off("cpu", interpret=False):
        assert os.environ["TRITON_INTERPRET"] == "0"  # what an engine's layers read at build
    assert os.environ.get("TRITON_INTERPRET") == "1"  # the specs' setting, given back


def test_the_stream_decoder_holds_back_half_a_character():
    tokenizer = byte_tokenizer()
    ids = tokenizer.encode("été à Paris")
    decoder = StreamDecoder(tokenizer)
    pieces = [decoder.push(t) for t in ids]
    assert "".join(pieces) + decoder.flush() == "été à Paris"
    assert pieces[0] == ""  # the first byte of é alone is not text yet


def test_the_stream_decoder_decodes_a_few_ids_per_token_however_long_the_answer():
    """What it hands the tokenizer, watched: windows of a few ids, where decoding the answer so
    far at every token made a 1,000-token stream cost a million ids' decoding."""
    tokenizer = byte_tokenizer()
    text = "été à Paris, 你好 🙂 " * 30
    decoded, decode = [], tokenizer.decode
    tokenizer.decode = lambda ids, **kw: decoded.append(len(ids)) or decode(ids, **kw)
    decoder = StreamDecoder(tokenizer)
    assert "".join(decoder.push(t) for t in tokenizer.encode(text)) + decoder.flush() == text
    assert max(decoded) <= 8, max(decoded)  # a 4-byte character and the one before it


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
    "a missing --impl-root": (("generate", "hi", "--impl-root", "{missing}", "--model", TINY),
                              "--impl-root {missing}: does not exist"),
    "check of a missing tree": (("check", "{missing}"), "learner tree {missing}: does not exist"),
    "diff in a missing --impl-root": (("diff", "v01_0", "--impl-root", "{missing}"),
                                      "--impl-root {missing}: does not exist"),
    "a negative --max-new-tokens": (("generate", "hi", "--impl", "v00", "--model", TINY,
                                     "--max-new-tokens", "-30"), "at least 1, got -30"),
    "--model naming a file": (("generate", "hi", "--impl", "v00", "--model", TINY / "config.json"),
                              "neither a GGUF file nor a Hugging Face checkpoint directory"),
    "a negative --temperature": (("generate", "hi", "--model", TINY, "--temperature", "-1"),
                                 "--temperature must be 0 (greedy) or a number from 1e-05 to 3.403e+38"),
    "a --top-p of 0": (("generate", "hi", "--model", TINY, "--temperature", "1", "--top-p", "0"),
                       "--top-p must be a number in (0, 1]"),
    "--threads 0": (("generate", "hi", "--model", TINY, "--threads", "0"),
                    "--threads must be at least 1, got 0"),
    "a negative --speculate": (("generate", "hi", "--model", TINY, "--speculate", "-1"),
                               "--speculate must be at least 0, got -1"),
    "--acceptance without --speculate": (("generate", "hi", "--model", TINY, "--acceptance",
                                          "rejection"),
                                         "--acceptance rejection needs --speculate above 0"),
}


@pytest.mark.parametrize("mistake", MISTAKES, ids=list(MISTAKES))
def test_each_user_mistake_is_one_clear_line_and_a_failing_exit_status(capsys, tmp_path, mistake):
    """In-process: main() returns the status and a traceback would escape it, as from a shell."""
    argv, message = MISTAKES[mistake]
    missing = str(tmp_path / "nope")
    code, out, err = run(capsys, *[str(a).format(missing=missing) for a in argv])
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert message.format(missing=missing) in line and out == ""


def test_a_prompt_that_is_not_utf8_is_one_clear_line():
    """A subprocess: the bytes must come through a real argv to arrive as Python makes them."""
    proc = command("generate", b"caf\xe9", "--impl", "v00", "--model", TINY)
    _, err = proc.communicate(timeout=120)
    assert "not valid UTF-8" in assert_one_line(proc.returncode, err, "torchlet: error")


# Pauses the child at the first import of MODULE (inside start-up) and tells the parent so on
# stdout; the parent's SIGINT then lands there, at a known point, with no timing involved.
# SIGINT gets Python's handler back first: a child inherits an ignored SIGINT (some spec earlier in
# the same pytest worker leaves it so; the whole suite showed it), and then no Ctrl-C reaches it.
PAUSE = """import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
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
    assert proc.returncode == 130, err.decode("utf-8", "replace")
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



@pytest.mark.parametrize("command", ["generate", "chat", "serve"])
def test_speculate_on_a_version_without_the_capability_is_one_line_naming_it(capsys, command):
    """Refused before the model loads (TINY has no tokenizer), by every command that takes the
    flag: the line names the version, the capability and the versions that have it."""
    prompt = ["hi"] if command == "generate" else []
    code, out, err = run(capsys, command, *prompt, "--impl", "v16", "--model", str(TINY),
                         "--speculate", "2")
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert line == ("torchlet: error: v16_tensor_parallel does not speculate: --speculate 2 needs "
                    "a version with the speculative capability (v17 and later), or leave --impl "
                    "out") and out == ""


VERSION_MISTAKES = {
    "a prefix of two versions": (("--impl", "v01"),
                                 "ambiguous version 'v01': v01_0 or v01_1 (v01_0_ragged_batch, "
                                 "v01_1_split_gqa)"),
    "an empty --impl": (("--impl", ""), "the version name is empty; known versions: v00_"),
    "a tree without versions, --impl given": (("--impl", "v00", "--impl-root", "{empty}"),
                                              "{empty} holds no versions: a version is a package "
                                              "named vNN_name"),
    "a tree without versions, the default": (("--impl-root", "{empty}"),
                                             "{empty} holds no versions"),
}


@pytest.mark.parametrize("mistake", VERSION_MISTAKES, ids=list(VERSION_MISTAKES))
def test_a_version_that_cannot_be_picked_says_why_in_one_line(capsys, tmp_path, mistake):
    argv, message = VERSION_MISTAKES[mistake]
    argv = [a.format(empty=tmp_path) for a in argv]
    code, out, err = run(capsys, "generate", "hi", "--model", str(TINY), *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("torchlet: error: " + message.format(empty=tmp_path)), err


@pytest.mark.parametrize("flag", ["--top-k=5", "--top-p=0.9", "--min-p=0.1", "--seed=3"])
def test_a_sampling_filter_or_seed_without_a_temperature_is_refused_not_ignored(capsys, flag):
    code, out, err = run(capsys, "generate", "hi", "--model", str(TINY), flag)
    name = flag.split("=")[0]
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err == f"torchlet: error: {name} needs --temperature above 0: without it decoding is " \
                  f"greedy\n"


def banner(err: str) -> str:
    return err.splitlines()[0]


def test_an_unseeded_sampled_run_shows_the_seed_it_drew_and_that_seed_repeats_the_answer(
        capsys, chat_model):
    base = ("generate", "Hello", "--model", str(chat_model), "--max-new-tokens", "12",
            "--temperature", "1.5", "--no-chat", "--device", "cpu")
    code, drawn, err = run(capsys, *base)
    assert code == 0, err
    (seed,) = re.findall(r"seed=(\d+) \(drawn\)", banner(err))
    code, again, err = run(capsys, *base, "--seed", seed)
    assert code == 0, err
    assert again == drawn and f"seed={seed}" in banner(err) and "drawn" not in banner(err)
    code, other, err = run(capsys, *base, "--seed", str(int(seed) + 1))
    assert other != drawn  # the seed, not luck, made the two answers equal


def test_seed_minus_one_draws_a_seed_as_an_unseeded_run_does_and_help_says_so(capsys,
                                                                             chat_model):
    """llama.cpp's users write --seed -1 for a random seed; it was taken as the fixed seed -1."""
    base = ("generate", "Hello", "--model", str(chat_model), "--max-new-tokens", "2",
            "--no-chat", "--device", "cpu")
    code, out, err = run(capsys, *base, "--temperature", "1.5", "--seed", "-1")
    assert code == 0, err
    assert re.search(r"seed=\d+ \(drawn\)", banner(err)), banner(err)
    code, out, err = run(capsys, *base, "--seed", "-1")  # greedy: it asks for no fixed seed
    assert code == 0 and "greedy" in banner(err), err
    with pytest.raises(SystemExit):
        cli.main(["generate", "--help"])
    assert "(left out or -1, as in llama.cpp: one drawn at random" in " ".join(
        capsys.readouterr().out.split())


def test_threads_sets_torchs_threads_for_the_run_and_the_banner_says_so(capsys, monkeypatch,
                                                                         chat_model):
    seen = []
    push = StreamDecoder.push
    monkeypatch.setattr(StreamDecoder, "push",
                        lambda self, t: seen.append(torch.get_num_threads()) or push(self, t))
    before = torch.get_num_threads()
    code, out, err = run(capsys, "generate", "Hello", "--model", str(chat_model), "--impl", "v00",
                         "--max-new-tokens", "3", "--threads", str(before + 1))
    assert code == 0, err
    assert seen and set(seen) == {before + 1}
    assert f", {before + 1} threads, " in banner(err)
    assert torch.get_num_threads() == before  # main() called in-process gives the setting back


@pytest.mark.parametrize("cores, load, threads", [(4, 1.0, 3), (2, 1.6, 1), (2, 7.0, 1),
                                                  (8, 0.0, 8)])
def test_without_threads_the_run_takes_the_cores_the_load_leaves_free(capsys, monkeypatch,
                                                                      chat_model, cores, load,
                                                                      threads):
    """Torch's own default, every core, made SmolLM2 ~10x slower on a busy 2-core machine."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    seen = []
    push = StreamDecoder.push
    monkeypatch.setattr(StreamDecoder, "push",
                        lambda self, t: seen.append(torch.get_num_threads()) or push(self, t))
    code, out, err = run(capsys, "generate", "Hello", "--model", str(chat_model), "--impl", "v00",
                         "--max-new-tokens", "2")
    assert code == 0, err
    assert seen and set(seen) == {threads}
    plural = "" if threads == 1 else "s"
    assert f", {threads} thread{plural} ({cores} cores, load {load:.1f}), " in banner(err)


def test_threads_above_the_cores_get_a_one_line_warning_and_the_run_goes_on(capsys, monkeypatch,
                                                                          chat_model):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    base = ("generate", "Hello", "--model", str(chat_model), "--impl", "v00",
            "--max-new-tokens", "2")
    code, out, err = run(capsys, *base, "--threads", "3")
    assert code == 0 and out, err
    lines = err.splitlines()
    assert lines[0] == ("torchlet: warning: --threads 3 is more than the 2 cores this process "
                        "may use: the threads past them only wait their turn")
    assert ", 3 threads, " in lines[1]  # still as asked
    code, out, err = run(capsys, *base, "--threads", "2")
    assert code == 0 and "warning" not in err, err


@pytest.fixture(scope="module")
def ascii_model(tmp_path_factory):
    """Answers in printable ASCII: two prompts that get other tokens get other text."""
    path = tmp_path_factory.mktemp("ascii_model")
    save_tiny(path, "llama", tokenizer=True, seed=5, printable=True)
    return path


def test_the_prompt_comes_from_stdin_with_a_dash_or_from_a_file(capsys, monkeypatch, tmp_path,
                                                               ascii_model):
    base = ("--model", str(ascii_model), "--impl", "v00", "--max-new-tokens", "6")
    code, expected, err = run(capsys, "generate", "Hello", *base)
    assert code == 0 and expected.strip(), err
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello\n"))
    assert run(capsys, "generate", "-", *base)[:2] == (0, expected)
    (tmp_path / "prompt.txt").write_text("Hello\n", encoding="utf-8")
    assert run(capsys, "generate", "--prompt-file", str(tmp_path / "prompt.txt"), *base)[:2] == (
        0, expected)
    # and it is the text that was sent, not just some prompt
    (tmp_path / "other.txt").write_text("Goodbye", encoding="utf-8")
    assert run(capsys, "generate", "--prompt-file", str(tmp_path / "other.txt"), *base)[1] != \
        expected


def test_speculate_prints_the_text_of_a_run_without_it_from_fewer_passes(capsys, monkeypatch,
                                                                         ascii_model):
    """--speculate 4 on v17: the same text as without it (exact acceptance keeps the tokens of a
    run that guesses nothing), and --stats shows that guesses were verified and some kept: this
    model's answer repeats itself, which prompt lookup guesses. Without --impl, --speculate
    picks the newest version that speculates, not the CPU's default (v07), and says so."""
    import implementations
    newest = [v.name for v in implementations.discover()
              if SPECULATIVE in v.capabilities][-1]
    # inherited Triton kernels on their PyTorch path: the interpreter would cost seconds here
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    base = ("generate", "Hello", "--model", str(ascii_model), "--max-new-tokens", "24")
    code, plain, err = run(capsys, *base, "--impl", "v17")
    assert code == 0 and len(plain) == 24 + 1, err
    code, out, err = run(capsys, *base, "--impl", "v17", "--speculate", "4", "--stats")
    assert code == 0, err
    assert out == plain
    assert "up to 4 guesses a step, exact acceptance" in err.splitlines()[0]
    stats = re.search(r"^\[speculation: (\d+) verify passes kept (\d+) tokens, [\d.]+ a pass; "
                      r"(\d+) of (\d+) guesses accepted", err, re.M)
    assert stats, err
    passes, kept, accepted, proposed = map(int, stats.groups())
    assert 0 < passes < kept and 0 < accepted <= proposed
    code, out, err = run(capsys, *base, "--speculate", "4")
    assert code == 0 and out == plain, err
    assert err.startswith(f"[{newest} on cpu"), err


@pytest.fixture(scope="module")
def roomy_model(tmp_path_factory):
    """Printable answers, so never an end token, and a context of 256: room for 128 tokens."""
    path = tmp_path_factory.mktemp("roomy_model")
    save_tiny(path, "llama", tokenizer=True, seed=5, printable=True, max_position_embeddings=256)
    return path


def test_an_answer_cut_at_the_default_limit_says_so_in_one_line(capsys, roomy_model):
    code, out, err = run(capsys, "generate", "Hello", "--model", str(roomy_model))
    assert code == 0, err
    assert len(out) == 128 + 1  # a character a token
    assert err.splitlines()[1:-1] == ["[stopped at 128 tokens: --max-new-tokens N for more]"]
    code, out, err = run(capsys, "generate", "Hello", "--model", str(roomy_model),
                         "--max-new-tokens", "8")
    assert code == 0 and len(out) == 8 + 1, err
    assert "stopped" not in err  # a limit the user set is no news


def test_a_max_new_tokens_past_the_context_is_capped_to_what_the_prompt_leaves(capsys,
                                                                              ascii_model):
    """It was refused: the user cannot know how many tokens the chat template adds."""
    prompt = len(prompt_ids(load_tokenizer(ascii_model), "Hello"))
    room = 128 - prompt
    code, out, err = run(capsys, "generate", "Hello", "--model", str(ascii_model),
                         "--max-new-tokens", "100000000")
    assert code == 0, err
    assert len(out) == room + 1
    assert err.splitlines()[1:-1] == [
        f"[--max-new-tokens 100000000 capped to {room}: the model's context holds 128 tokens, "
        f"the prompt {prompt}]",
        f"[stopped at {room} tokens: the end of the model's context of 128 tokens]"]
    code, out, err = run(capsys, "generate", "x" * 128, "--model", str(ascii_model))
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert line.endswith("tokens and the model's context holds 128: no room for an answer")


PROMPT_MISTAKES = {
    "a missing file": (("--prompt-file", "{tmp}/nope.txt"),
                       "--prompt-file {tmp}/nope.txt: No such file or directory"),
    "a directory": (("--prompt-file", "{tmp}"), "--prompt-file {tmp}: Is a directory"),
    "an empty file": (("--prompt-file", "{tmp}/empty.txt"), "--prompt-file {tmp}/empty.txt is "
                                                            "empty"),
    "a file that is not UTF-8": (("--prompt-file", "{tmp}/latin1.txt"),
                                 "--prompt-file {tmp}/latin1.txt: not UTF-8 text"),
    "both a prompt and a file": (("hi", "--prompt-file", "{tmp}/empty.txt"),
                                 "give the prompt as PROMPT (- reads stdin) or with --prompt-file, "
                                 "not both"),
    "no prompt at all": ((), "no prompt: give it as PROMPT, as - to read it from stdin"),
    "an empty stdin": (("-",), "the prompt read from stdin is empty"),
    "an empty argument": (("  ",), "the prompt is empty"),
}


@pytest.mark.parametrize("mistake", PROMPT_MISTAKES, ids=list(PROMPT_MISTAKES))
def test_a_prompt_that_cannot_be_read_is_one_clear_line(capsys, monkeypatch, tmp_path, mistake):
    argv, message = PROMPT_MISTAKES[mistake]
    (tmp_path / "empty.txt").write_text("\n")
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, out, err = run(capsys, "generate", *[a.format(tmp=tmp_path) for a in argv],
                         "--model", str(TINY))
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith(f"torchlet: error: {message.format(tmp=tmp_path)}"), err


def test_a_reader_that_closed_the_pipe_ends_generate_quietly_with_status_141(chat_model):
    """`torchlet generate ... | head -2`: head leaves, the next write fails. Here the reading end
    is closed before the command starts, so its first write fails, whatever the timing."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([sys.executable, "-c", ENTRY, "generate", "Hello", "--impl", "v00",
                               "--max-new-tokens", "2", "--model", str(chat_model)],
                              cwd=REPO, env=child_env(), stdout=write, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, timeout=120)
    finally:
        os.close(write)
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 141, err
    assert "Traceback" not in err and "Broken pipe" not in err and "Exception ignored" not in err


class ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("argv", [("diff", "v00", "v01_0"), ("parts", "v01_0")],
                         ids=["diff", "parts"])
def test_every_command_that_prints_ends_quietly_with_status_141_on_a_closed_pipe(monkeypatch,
                                                                                capsys, argv):
    """One wrapper at the entry, so no command can forget it: in-process, a closed stdout."""
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code = cli.main(list(argv))
    assert (code, capsys.readouterr().err) == (141, "")


def test_an_unsupported_device_is_one_clear_line_before_the_model_loads(capsys, chat_model):
    """meta (and any device but cpu and cuda) used to get as far as the first forward pass."""
    code, out, err = run(capsys, "generate", "Hello", "--impl", "v00", "--model", str(chat_model),
                         "--max-new-tokens", "2", "--device", "meta")
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert line == "torchlet: error: --device meta: not a device Torchlet runs on (cpu, cuda, " \
                   "cuda:N)" and out == ""


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_docs_build_into_a_file_is_refused_before_the_build(capsys, monkeypatch, tmp_path, where):
    """The build takes minutes; a --out it cannot write used to fail only at its end."""
    from torchlet import docs

    monkeypatch.setattr(docs, "build", lambda *a, **k: pytest.fail("built before --out's check"))
    mine = tmp_path / "notes.txt"
    mine.write_text("mine\n")
    out_dir = mine if where == "a file" else mine / "site"
    code, out, err = run(capsys, "docs", "build", "--out", str(out_dir))
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert line == f"torchlet: error: --out {out_dir}: {mine} is a file, not a directory"
    assert mine.read_text() == "mine\n" and out == ""


def test_the_known_harmless_warnings_are_silenced_by_name_and_others_still_show(request,
                                                                             monkeypatch):
    """`pytest -n 2 -k v08` printed two warnings that ask nothing of this project:
    pytest-benchmark's (installed beside xdist, used by no spec) that it turns itself off under
    xdist, and transformers' that the oracle's `past_key_values` argument is renamed by 5.40.
    pyproject.toml's filterwarnings names each; a warning of the same kind in other words still
    shows. Each is raised here by the library's own code, so a changed text shows up here."""
    session = pytest.importorskip("pytest_benchmark.session")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")  # how the plugin knows it runs under xdist
    model = hf_model("llama")
    with warnings.catch_warnings(record=True) as shown:  # the run's filters still apply
        session.BenchmarkSession(request.config)
        with torch.inference_mode():
            model(torch.tensor([[1, 2]]), past_key_values=None)
        warnings.warn("`use_cache` is deprecated", FutureWarning)
    assert [str(w.message) for w in shown] == ["`use_cache` is deprecated"]
