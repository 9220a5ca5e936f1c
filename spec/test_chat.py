"""Page contract: `torchlet chat`, a conversation in a terminal, one streamed answer per line.

What it shows: the harness holds the conversation, not the engine. Each turn sends the whole
conversation again (system prompt, the questions and answers so far, the new question) through
the model's chat template (torchlet/text.py prompt_ids), so the second answer depends on the
first; /reset forgets it, Ctrl-D ends the chat with exit status 0, and a question that leaves
the model's context no room for an answer gets one line that says so and offers /reset. Ctrl-C
stops an answer and keeps it in the conversation as far as it went (a second one before it
stops ends the chat); at the prompt it only points to Ctrl-D and /exit. An answer cut at the
default limit, or at the context's end, says so in a line.

Core principle: the answers are checked against Hugging Face's own model given the conversation
as text through the same template, so the spec sees what a user sees, in a pseudo-terminal.

Files to compare: torchlet/chat.py, and torchlet/generate.py (Runner, which chat shares
with generate).

Tradeoff left visible: the model is a tiny random Llama whose output layer is cut down to the
printable ASCII bytes (the other rows zeroed), so that every answer is text a terminal shows as
it is and two answers that differ in tokens differ on screen (spec/support/models/hf_dirs.py
printable_only); its context of 128 tokens is what lets a few turns run out of it. The chat
sessions run in subprocesses (about 4 s each, torch's import; the Ctrl-C one once more with
two ranks); the edge cases run in-process, stdin replaced. A Ctrl-C lands mid-answer because
the subprocess holds that answer's token until the signal has come (PAUSE), not by timing.
"""
from __future__ import annotations

import io
import shutil
import sys
import termios
from pathlib import Path

import pexpect  # a dev extra (pyproject.toml)
import pytest
import torch

from spec.support.models.hf_dirs import SHAPE, byte_tokenizer, save_tiny
from torchlet import cli
from torchlet.learner import child_env
from torchlet.text import prompt_ids

REPO = Path(__file__).resolve().parents[1]
ENTRY = "import sys; from torchlet.cli import main; sys.exit(main())"  # the console script's code
NEW_TOKENS = 8
SYSTEM = "You answer in one word."
FIRST, SECOND = "My name is Ada.", "What is my name?"


@pytest.fixture(scope="module")
def ascii_model(tmp_path_factory):
    """A tiny Llama checkpoint with a byte tokenizer whose greedy answers are printable ASCII."""
    path = tmp_path_factory.mktemp("ascii_chat")
    model = save_tiny(path, "llama", tokenizer=True, seed=5, printable=True)
    return path, model, byte_tokenizer()


def oracle(model, tokenizer, messages) -> str:
    """HF's greedy answer to a conversation, as text."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
    return tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)


def ask(child, line: str) -> str:
    """Types a line at the prompt; what the chat printed before its next prompt."""
    child.sendline(line)
    child.expect_exact(line + "\r\n")  # the terminal's echo
    child.expect_exact("> ")
    return child.before


def test_a_chat_in_a_terminal_answers_each_turn_with_the_whole_conversation(ascii_model):
    path, model, tokenizer = ascii_model
    system = [{"role": "system", "content": SYSTEM}]
    first = oracle(model, tokenizer, system + [{"role": "user", "content": FIRST}])
    second = oracle(model, tokenizer, system + [{"role": "user", "content": FIRST},
                                                {"role": "assistant", "content": first},
                                                {"role": "user", "content": SECOND}])
    alone = oracle(model, tokenizer, system + [{"role": "user", "content": SECOND}])
    assert first and second != alone, "the fixture must answer otherwise without the first turn"
    after = oracle(model, tokenizer, system + [{"role": "user", "content": SECOND},
                                               {"role": "assistant", "content": alone},
                                               {"role": "user", "content": FIRST}])
    long = "x" * SHAPE["max_position_embeddings"]

    child = pexpect.spawn(sys.executable, ["-c", ENTRY, "chat", "--model", str(path),
                                           "--device", "cpu", "--max-new-tokens", str(NEW_TOKENS),
                                           "--system", SYSTEM],
                          cwd=REPO, env={**child_env(), "TERM": "dumb"}, encoding="utf-8",
                          timeout=120, dimensions=(24, 500))  # no escapes, no wrapped echo
    try:
        child.expect_exact("> ")
        assert child.before.startswith("[") and "greedy" in child.before.splitlines()[0]
        assert ask(child, FIRST) == first + "\r\n"
        assert ask(child, SECOND) == second + "\r\n"
        assert "a new conversation" in ask(child, "/reset")
        assert ask(child, SECOND) == alone + "\r\n"
        full = ask(child, long)
        assert full.count("\n") == 1 and "no longer fits" in full and "/reset" in full
        assert ask(child, FIRST) == after + "\r\n"  # the question that did not fit was dropped
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


# Pauses the K-th token of the answers numbered in PAUSED (1: the first) on its way to the
# screen, says so on stderr and waits there for a signal, its handler run (the spec's Ctrl-C),
# twice in the answers numbered in TWICE: a Ctrl-C then lands mid-answer at a known token, with
# no timing involved. It waits on the wakeup fd, where a caught signal leaves a byte whether it
# comes before the wait or during it (signal.pause() missed one that came just before). SIGINT
# gets Python's handler back first, as in spec/test_cli.py's PAUSE: a child inherits an ignored
# SIGINT from the pytest worker.
PAUSE = """import os, select, signal
signal.signal(signal.SIGINT, signal.default_int_handler)
from torchlet.text import StreamDecoder
caught, wake = os.pipe()
os.set_blocking(caught, False)
os.set_blocking(wake, False)
signal.set_wakeup_fd(wake)
push, answers = StreamDecoder.push, []
def handlers_run():
    pass  # a call to a Python function runs the handlers of the signals caught so far
def until_a_signal(marker):
    try:
        os.read(caught, 64)  # the Ctrl-Cs at the prompt, before
    except BlockingIOError:
        pass
    os.write(2, marker)
    select.select([caught], [], [])
    os.read(caught, 1)
    handlers_run()
def paused(self, token):
    text = push(self, token)
    answers.extend([self] if len(self.ids) == 1 else [])
    if len(self.ids) == {k} and len(answers) in {paused}:
        until_a_signal(b"<paused>")
        if len(answers) in {twice}:
            until_a_signal(b"<paused again>")
    return text
StreamDecoder.push = paused
"""
K = 3
STOPPED = "[stopped: the answer so far stays in the conversation]"
AT_PROMPT = "[Ctrl-D or /exit ends the chat]"


@pytest.mark.parametrize("ranks", [(), ("--tensor-parallel", "2")],
                         ids=["one-device", "tensor-parallel"])
def test_ctrl_c_stops_the_answer_keeps_the_conversation_and_at_the_prompt_points_to_ctrl_d(
        ascii_model, ranks):
    """As llama.cpp's CLI does, the answer stopped stays in the conversation as far as it was
    shown (Ollama drops it and keeps the question), a second Ctrl-C before it stops ends the
    chat (a step, a long prompt's prefill, can take minutes), and at the prompt Ctrl-C, pressed
    any number of times, only points to Ctrl-D and /exit, as Ollama does (llama.cpp quits):
    the Ctrl-C pressed twice to stop an answer would otherwise end the chat. With ranks, the
    terminal signals them too: they ignore it, and rank 0 stops them when the chat ends."""
    path, model, tokenizer = ascii_model
    whole = oracle(model, tokenizer, [{"role": "user", "content": FIRST}])
    cut = whole[:K]
    after = oracle(model, tokenizer, [{"role": "user", "content": FIRST},
                                      {"role": "assistant", "content": cut},
                                      {"role": "user", "content": SECOND}])
    assert len(whole) == NEW_TOKENS and "^C" not in whole  # a character a token, no echo lookalike
    child = pexpect.spawn(sys.executable, ["-c", PAUSE.format(k=K, paused={1, 3}, twice={3})
                                           + ENTRY, "chat", "--model", str(path), "--device",
                                           "cpu", "--max-new-tokens", str(NEW_TOKENS),
                                           *ranks],
                          cwd=REPO, env={**child_env(), "TERM": "dumb"}, encoding="utf-8",
                          timeout=120, dimensions=(24, 500))
    child.logfile_read = shown = io.StringIO()
    # Ctrl-C makes the terminal drop what the chat wrote and the spec has not read yet, unless
    # NOFLSH is set: a race of the spec's making, not the chat's.
    attrs = termios.tcgetattr(child.child_fd)
    attrs[3] |= termios.NOFLSH
    termios.tcsetattr(child.child_fd, termios.TCSANOW, attrs)
    try:
        child.expect_exact("> ")
        child.sendline(FIRST)
        child.expect_exact(FIRST + "\r\n")
        child.expect_exact("<paused>")
        assert child.before == cut[:-1]
        child.sendintr()
        child.expect_exact("> ")
        assert child.before.replace("^C", "") == cut[-1] + "\r\n" + STOPPED + "\r\n"
        for _ in range(2):
            child.sendintr()
            child.expect_exact(AT_PROMPT)
            child.expect_exact("> ")
        assert ask(child, SECOND) == after + "\r\n"  # it saw the question and the cut answer
        assert "a new conversation" in ask(child, "/reset")
        child.sendline(FIRST)
        child.expect_exact("<paused>")
        child.sendintr()
        child.expect_exact("<paused again>")
        child.sendintr()
        child.expect(pexpect.EOF)
        assert child.before.strip().splitlines()[-1] == "torchlet: interrupted"
    finally:
        child.close(force=True)
    assert child.exitstatus == 130 and "Traceback" not in shown.getvalue()


def chat(capsys, monkeypatch, lines: str, *argv, new_tokens=NEW_TOKENS):
    """`torchlet chat ARGV` in-process, typing `lines` (stdin is not a terminal: no prompts);
    new_tokens None leaves --max-new-tokens out."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    limit = ("--max-new-tokens", str(new_tokens)) if new_tokens is not None else ()
    code = cli.main(["chat", "--device", "cpu", *limit, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_exit_and_end_of_input_end_the_chat_and_an_unknown_command_is_not_sent(capsys,
                                                                              monkeypatch,
                                                                              ascii_model):
    path, model, tokenizer = ascii_model
    first = oracle(model, tokenizer, [{"role": "user", "content": FIRST}])
    code, out, err = chat(capsys, monkeypatch, f"/help\n\n{FIRST}\n/exit\n{SECOND}\n",
                          "--model", str(path))
    assert code == 0 and "Traceback" not in err
    assert out == first + "\n"  # one answer: not to /help, nor to what came after /exit
    assert "[unknown command /help]" in err
    code, out, err = chat(capsys, monkeypatch, FIRST, "--model", str(path))  # no newline, EOF
    assert code == 0 and out == first + "\n" and "Traceback" not in err


def test_a_chat_that_cannot_start_is_one_clear_line(capsys, monkeypatch, ascii_model, tmp_path):
    path, _, _ = ascii_model
    code, out, err = chat(capsys, monkeypatch, FIRST, "--model", str(path), "--system", " ")
    assert (code, out, err) == (1, "", "torchlet: error: --system is empty (leave it out for no "
                                       "system prompt)\n")
    shutil.copytree(path, tmp_path / "plain")
    (tmp_path / "plain" / "chat_template.jinja").unlink()  # where transformers 5 keeps it
    code, out, err = chat(capsys, monkeypatch, FIRST, "--model", str(tmp_path / "plain"))
    assert code == 1 and out == "" and err.count("\n") == 1
    assert "tokenizer has no chat template, which a chat needs" in err


def test_an_answer_cut_at_a_limit_says_so_and_a_limit_past_the_context_is_capped(
        capsys, monkeypatch, ascii_model, tmp_path):
    """The default limit, 128 tokens, cuts an answer with a line that says how to get more; a
    --max-new-tokens past the model's context is capped with a line at the start (it used to
    refuse every question), and an answer that reaches the context's end says so."""
    roomy = tmp_path / "roomy"  # room for 128 tokens, never an end token (printable answers)
    save_tiny(roomy, "llama", tokenizer=True, seed=5, printable=True, max_position_embeddings=256)
    capsys.readouterr()  # saving it shows a progress bar
    code, out, err = chat(capsys, monkeypatch, FIRST, "--model", str(roomy), new_tokens=None)
    assert code == 0 and len(out) == 128 + 1, err
    assert err.splitlines()[2:] == ["[stopped at 128 tokens: --max-new-tokens N for more]"]
    path, _, tokenizer = ascii_model
    room = 128 - len(prompt_ids(tokenizer, [{"role": "user", "content": FIRST}]))
    code, out, err = chat(capsys, monkeypatch, f"{FIRST}\n{SECOND}\n", "--model", str(path),
                          new_tokens=100000000)
    assert code == 0 and len(out) == room + 1, err
    notes = err.splitlines()[2:]
    assert notes[:2] == ["[--max-new-tokens 100000000 is more than the model's context of 128 "
                         "tokens: answers stop where it ends]",
                         f"[stopped at {room} tokens: the end of the model's context of 128 "
                         f"tokens]"]
    assert "no longer fits" in notes[2] and len(notes) == 3  # the second question: no room
