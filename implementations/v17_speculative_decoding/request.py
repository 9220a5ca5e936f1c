"""v15's request, which may hold guesses at the end of its sequence while one pass verifies them,
and take several tokens a step: the ones the pass kept."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..v16_tensor_parallel import ChunkedRequest


@dataclass
class SpeculativeRequest(ChunkedRequest):
    # Guesses at the end of `sequence` that are no tokens of it: only while a verifying pass
    # reads them (its rows, its positions and its K/V slots come from the sequence, as a prefill
    # slice's do). 0 between steps.
    guessed: int = field(default=0, repr=False, compare=False)

    def guess(self, tokens: Sequence[int]) -> None:
        """Hold these guesses after the sequence's last token for one pass."""
        self.sequence.extend(tokens)
        self.guessed = len(tokens)

    def settle(self) -> None:
        """Drop the guesses: the tokens kept come back through extend()."""
        if self.guessed:
            del self.sequence[-self.guessed:]
            self.guessed = 0

    def extend(self, tokens: Sequence[int]) -> None:
        """append() each token in turn; tokens after the one that finishes it are not taken."""
        for token in tokens:
            if self.finished:
                return
            self.append(token)
