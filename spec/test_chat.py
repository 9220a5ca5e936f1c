"""Page contract: `torchlet chat`, a conversation in a terminal, one streamed answer per line.

What it shows: the harness holds the conversation, not the engine. Each turn sends the whole
conversation again (system prompt, the questions and answers so far, the new question) through
the model's chat template (torchlet/text.py prompt_ids), so the second answer depends on the
first; /reset forgets it, Ctrl-D ends the chat with exit status 0, and a question that would
take the conversation past the model's context gets one line that says so and offers /reset.

Core principle: the answers are checked against Hugging Face's own model given the conversation
as text through the same template, so the spec sees what a user sees, in a pseudo-terminal.

Files to compare: torchlet/chat.py, and torchlet/cli.py (Runner, which chat shares with
generate).

Tradeoff left visible: the model is a tiny random Llama whose output layer is cut down to the
printable ASCII bytes (the other rows zeroed), so that every answer is text a terminal shows as
it is and two answers that differ in tokens differ on screen (spec/support/hf_dirs.py
printable_only); its context of 128 tokens is what lets a few turns run out of it. One chat
session runs in a subprocess (about 4 s, torch's import); the edge cases run in-process, stdin
replaced.
"""
from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import pexpect  # a dev extra (pyproject.toml)
import pytest
import torch

from spec.support.hf_dirs import SHAPE, byte_tokenizer, save_tiny
from torchlet import cli
from torchlet.learner import child_env

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


def chat(capsys, monkeypatch, lines: str, *argv):
    """`torchlet chat ARGV` in-process, typing `lines` (stdin is not a terminal: no prompts)."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    code = cli.main(["chat", "--device", "cpu", "--max-new-tokens", str(NEW_TOKENS), *argv])
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
