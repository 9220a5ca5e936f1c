"""A grammar over token ids: what a request's `GenerationParams.grammar` holds (v19,
structured output). The harness compiles a constraint written as text (a JSON schema, a regex,
a choice list, an EBNF grammar) against a tokenizer's vocabulary, with xgrammar
(torchlet/grammar.py); an engine sees only these two Protocols, token ids in and out.

The bitmask: a row of int32 words, ceil(vocab_size / 32) of them; token t is allowed when bit
t % 32 of word t // 32 is set (xgrammar's layout, and vLLM's and SGLang's). Bits past the
vocabulary are never read."""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import torch


def bitmask_words(vocab_size: int) -> int:
    """int32 words a bitmask row of this vocabulary holds."""
    return (vocab_size + 31) // 32


@runtime_checkable
class GrammarMatcher(Protocol):
    """One request's place in its grammar: the tokens it has taken so far."""

    def fill(self, bitmask: torch.Tensor) -> None:
        """Write the tokens the grammar allows next into bitmask, an int32 host tensor of
        bitmask_words(vocab_size) words (every bit written)."""

    def accept(self, token: int) -> bool:
        """Take the token if the grammar allows it next (True); else change nothing (False)."""

    def rollback(self, count: int) -> None:
        """Undo the last `count` accepted tokens (at most those accepted since the matcher was
        made): what speculation does with guesses it does not keep."""

    def completed(self) -> bool:
        """Whether the tokens taken make a whole sentence of the grammar (it may still go on:
        a regex `a+` after one `a`)."""


@runtime_checkable
class Grammar(Protocol):
    """A compiled constraint: immutable, shared by the requests that ask for it."""

    vocab_size: int             # the bitmask's tokens: the model's vocabulary
    description: str            # what it constrains to, for messages ("json_schema", "regex ...")

    def matcher(self, stop_token_ids: Sequence[int]) -> GrammarMatcher:
        """A matcher at the start of the grammar. Once the grammar is complete it allows
        exactly these tokens (the request's own eos and stop ids), which end the request; with
        none, a complete grammar allows nothing more."""
