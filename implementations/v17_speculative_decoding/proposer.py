"""The proposer part: guesses of each request's next tokens, made cheaply on the host.

NgramProposer is prompt lookup: the last n tokens of a request's sequence are looked for earlier
in the same sequence, latest occurrence first, and the tokens that followed them are the guess
(n from `ngram` down to 1). It needs no second model and costs a scan of the sequence; it is
right where the answer copies its context (code edited in place, a list continued, a quote) and
proposes nothing where no n-gram repeats."""
from __future__ import annotations

from typing import Sequence

from torchlet.contract import BuildOption


class NgramProposer:
    OPTIONS = (
        BuildOption("ngram", int, 3, "the longest n-gram the proposer looks up (then n - 1, "
                    "down to 1)", minimum=1),
    )

    def __init__(self, ngram: int = 3):
        self.ngram = ngram

    @classmethod
    def assemble(cls, a) -> "NgramProposer":
        return cls(a.options["ngram"])

    def propose(self, requests: Sequence, k: int) -> list[list[int]]:
        """Per request, the up to k tokens that followed the latest earlier occurrence of its
        last n tokens, for the largest n that occurs; [] where none does."""
        return [lookup(r.sequence, self.ngram, k) for r in requests]


def lookup(sequence: Sequence[int], ngram: int, k: int) -> list[int]:
    """The up to k tokens after the latest occurrence of sequence's last n tokens that ends
    before the sequence does, for the largest n <= ngram that has one."""
    length = len(sequence)
    for n in range(min(ngram, length - 1), 0, -1):
        tail = list(sequence[length - n:])
        first = tail[0]
        for start in range(length - n - 1, -1, -1):  # latest first; never the tail itself
            if sequence[start] == first and list(sequence[start:start + n]) == tail:
                return list(sequence[start + n:start + n + k])
    return []
