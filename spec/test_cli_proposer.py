"""Page contract: `--proposer ngram|PATH|self:N`, what guesses for --speculate (v17).

What it introduces: generate, chat and serve pick v17's proposer. ngram (the default) is prompt
lookup in the request's own text; PATH is a draft model, a directory or .gguf file found and
loaded as --model is, which must have the target's vocabulary; self:N is a self-draft, the
target's own first N layers with its embedding, final norm and LM head (checkpoints.self_draft),
made from the loaded checkpoint without a second file. The banner names a proposer that is not
ngram ("draft: NAME", "self-draft: first N layers").
Why: prompt lookup guesses only where an answer copies its context; a draft model guesses
everywhere, at the price of its own passes. A self-draft is the cheapest draft to try: nothing
to download, and the same tokenizer by construction.
Core principle: exact acceptance keeps the tokens of a run without --speculate whatever guesses,
so every proposer prints the same text; a draft identical to the target guesses exactly what
the target computes, so every one of its guesses is accepted. Every mistake is one line before
anything slow where it can be: --proposer without --speculate, a self:N that is no number of
layers (self:0 before the model loads; N at or past the target's layers once it is loaded), a
draft of another vocabulary (both sizes named).
Files: torchlet/running.py (add_speculate, speculation_options, load_proposer, run_mode),
torchlet/checkpoints.py (self_draft), torchlet/generate.py and torchlet/serve/launch.py (where
the proposer is loaded); implementations/v17_speculative_decoding/proposer.py (what takes it).
Tradeoff left visible: the draft is loaded whole beside the target (a self-draft shares the
target's tensors, a PATH does not), and --tensor-parallel refuses a draft: the draft would run
on rank 0's process alone while its checkpoint travelled to every rank.
"""
from __future__ import annotations

import re

import pytest

from spec.support.models.hf_dirs import VOCAB, ascii_chat_dir
from spec.test_cli import TINY, assert_one_line, run

STATS = re.compile(r"^\[speculation: (\d+) verify passes kept (\d+) tokens, [\d.]+ a pass; "
                   r"(\d+) of (\d+) guesses accepted", re.M)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A 2-layer Llama with the byte tokenizer (259 ids) that answers in printable ASCII."""
    return ascii_chat_dir(tmp_path_factory.mktemp("proposer_model"))


@pytest.fixture
def generate(capsys, monkeypatch, model):
    """`torchlet generate Hello` on the model with v17, 24 tokens, and the flags given."""
    # inherited Triton kernels on their PyTorch path: the interpreter would cost seconds here
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    return lambda *flags: run(capsys, "generate", "Hello", "--model", str(model), "--impl", "v17",
                              "--max-new-tokens", "24", *flags)


def stats(err: str) -> tuple[int, int, int, int]:
    found = STATS.search(err)
    assert found, err
    return tuple(map(int, found.groups()))


def test_a_self_draft_prints_the_text_of_a_run_without_speculation(generate):
    code, plain, err = generate()
    assert code == 0 and len(plain) == 24 + 1, err
    code, out, err = generate("--speculate", "3", "--proposer", "self:1", "--stats")
    assert code == 0, err
    assert out == plain
    assert ("up to 3 guesses a step, exact acceptance, self-draft: first 1 layer, "
            in err.splitlines()[0])
    passes, kept, accepted, proposed = stats(err)
    # the first token is the prefill's; a step with no guess (none made, or no room left) is a
    # plain decode step, so the verifying passes keep at most the other 23
    assert passes > 0 and proposed > 0 and passes <= kept <= 24 - 1


def test_a_draft_identical_to_the_target_has_every_guess_accepted(generate, model):
    """The draft is the target's own directory: its greedy guesses are the target's tokens."""
    code, plain, err = generate()
    assert code == 0, err
    code, out, err = generate("--speculate", "3", "--proposer", str(model), "--stats")
    assert code == 0, err
    assert out == plain
    assert f"exact acceptance, draft: {model.name}, " in err.splitlines()[0]
    passes, kept, accepted, proposed = stats(err)
    assert 0 < passes < kept and accepted == proposed > 0


def test_a_draft_of_another_vocabulary_is_refused_in_one_line_naming_both_sizes(generate):
    draft = TINY  # tiny_qwen2: 512 ids against the byte tokenizer's 259
    code, out, err = generate("--speculate", "3", "--proposer", str(draft))
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert line == (f"torchlet: error: --proposer {draft}: the draft's vocabulary (512 tokens) is "
                    f"not the target's ({VOCAB}): a draft must share the target's tokenizer")
    assert out == ""


def test_a_self_draft_of_every_layer_is_refused_once_the_model_says_how_many(generate):
    code, out, err = generate("--speculate", "3", "--proposer", "self:2")
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert line == ("torchlet: error: --proposer self:2: a self-draft keeps at least 1 and fewer "
                    "than all 2 of the model's layers, got 2") and out == ""


MISTAKES = {  # refused before the model loads: TINY has no tokenizer, which a load would miss
    "self:0": (("--speculate", "3", "--proposer", "self:0"),
               "--proposer self:0: self:N takes the target's first N layers as its draft, N at "
               "least 1 (e.g. self:8)"),
    "self:N not a number": (("--speculate", "3", "--proposer", "self:eight"),
                            "--proposer self:eight: self:N takes the target's first N layers"),
    "without --speculate": (("--proposer", "self:1"),
                            "--proposer self:1 needs --speculate above 0: without it nothing is "
                            "guessed"),
}


@pytest.mark.parametrize("command", ["generate", "chat", "serve"])
@pytest.mark.parametrize("mistake", MISTAKES, ids=list(MISTAKES))
def test_each_proposer_mistake_is_one_line_before_the_model_loads(capsys, command, mistake):
    flags, message = MISTAKES[mistake]
    prompt = ["hi"] if command == "generate" else []
    code, out, err = run(capsys, command, *prompt, "--impl", "v17", "--model", str(TINY), *flags)
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert line.startswith(f"torchlet: error: {message}") and out == ""


INVARIANT_MISTAKES = {  # --batch-invariant (v17's batch_invariant), refused before the model loads
    "a version without it": (("--impl", "v16", "--batch-invariant"),
                             "v16_tensor_parallel has no batch-invariant mode: --batch-invariant "
                             "needs v17 or later"),
    "a CPU without the interpreter": (("--impl", "v17", "--batch-invariant"),
                                      "--batch-invariant runs on the Triton kernels: on a GPU"),
    "beside --quantize": (("--impl", "v18", "--batch-invariant", "--triton-interpret",
                           "--quantize", "int8"),
                          "--batch-invariant multiplies float matrices: leave out --quantize "
                          "int8"),
}


@pytest.mark.parametrize("command", ["generate", "chat", "serve"])
@pytest.mark.parametrize("mistake", INVARIANT_MISTAKES, ids=list(INVARIANT_MISTAKES))
def test_each_batch_invariant_mistake_is_one_line_before_the_model_loads(capsys, command,
                                                                         mistake):
    flags, message = INVARIANT_MISTAKES[mistake]
    prompt = ["hi"] if command == "generate" else []
    code, out, err = run(capsys, command, *prompt, "--model", str(TINY), *flags)
    line = assert_one_line(code, err.encode(), "torchlet: error")
    assert line.startswith(f"torchlet: error: {message}") and out == ""
