"""v17's sampler, whose draws take only the tokens each request's grammar allows: the grammar
part's masks (grammar.py) applied to the logits before temperature, the filters and the race,
in every way the engine draws: a prefill's first token (draw), a decode step's lanes (the
"masked" graphs, reading a bitmask per lane the step's requests fill just before the replay),
and a verifying pass's rows (accept, each row masked after the guesses before it).

A decode launched ahead of a step's read-back (v14) would draw before the host has the token
its mask follows, so draws_ahead() says no for a batch with a constrained request and that step
runs in order. Its masks are then filled on the host before the replay; an unconstrained step
replays v17's graphs and reads no mask."""
from __future__ import annotations

from typing import Sequence

import torch

from ..v18_quantized_weights import SpeculativeSampler
from .grammar import ALL

# The masked graphs, each drawing as one of v11's over masked logits (an all-greedy step takes
# the argmax there too: the filters' sorts would cost a CPU step more than the mask does).
MASKED = {"masked": "sample", "masked-greedy": "greedy"}


def constrained(requests: Sequence) -> bool:
    """Whether a request of these has a grammar."""
    return any(r.params.grammar is not None for r in requests)


class GrammarSampler(SpeculativeSampler):
    constrains = True  # check_request takes a grammar
    variants = SpeculativeSampler.variants + tuple(MASKED)
    def __init__(self, num_lanes: int, device, acceptance: str = "exact", grammar=None):
        super().__init__(num_lanes, device, acceptance)
        self.grammar = grammar
        # A lane's mask, read by the masked graphs: every token until a step fills it.
        self.bitmask = torch.full((num_lanes, grammar.words), ALL, dtype=torch.int32,
                                  device=device)

    @classmethod
    def assemble(cls, a) -> "GrammarSampler":
        return cls(a.kv.num_lanes, a.device, a.options["acceptance"], a.grammar)

    def draw(self, logits: torch.Tensor, requests: Sequence) -> torch.Tensor:
        """v11's eager draws (a prefill's first tokens), each row masked by its request's
        grammar."""
        if constrained(requests):
            logits = self.grammar.masked(logits, self.grammar.masks(requests).to(logits.device))
        return super().draw(logits, requests)

    def variant(self, lanes: Sequence[int], requests: Sequence) -> str:
        """v11's choice, masked where a request of the step has a grammar: its lanes' masks
        are written first (the other lanes' rows allow every token or hold an earlier step's
        mask, whose draws nothing reads)."""
        unmasked = super().variant(lanes, requests)
        if not constrained(requests):
            return unmasked
        rows = torch.tensor([r.lane for r in requests], device=self.bitmask.device)
        self.bitmask.index_copy_(0, rows, self.grammar.masks(requests).to(self.bitmask.device))
        return next(masked for masked, way in MASKED.items() if way == unmasked)

    def lane_tensors(self, variant: str) -> tuple[torch.Tensor, ...]:
        if variant in MASKED:
            return super().lane_tensors(MASKED[variant]) + (self.bitmask,)
        return super().lane_tensors(variant)

    def draw_lanes(self, variant: str, logits: torch.Tensor, positions: torch.Tensor,
                   *settings: torch.Tensor) -> torch.Tensor:
        """Inside the captured step: a masked graph draws as its v11 way does, from the masked
        logits."""
        if variant in MASKED:
            *settings, bitmask = settings
            return super().draw_lanes(MASKED[variant], self.grammar.masked(logits, bitmask),
                                      positions, *settings)
        return super().draw_lanes(variant, logits, positions, *settings)

    def accept(self, logits: torch.Tensor, requests: Sequence,
               guesses: Sequence[Sequence[int]]) -> list[list[int]]:
        """v17's acceptance over masked rows: a request's row j masked by its grammar after its
        tokens and guesses 0..j-1. A guess the grammar refuses is never kept (the engine's own
        draw there is one it allows). Where the grammar allows nothing at a row, the tokens
        kept stop before it, as one draw at a time would."""
        if not constrained(requests):
            return super().accept(logits, requests, guesses)
        block = self.grammar.block(logits.shape[0])
        block[:] = ALL
        dead, start = [], 0
        for request, guess in zip(requests, guesses):
            rows = block[start:start + len(guess) + 1]
            dead.append(None)
            if request.params.grammar is not None and not request.finished:
                try:
                    dead[-1] = self.grammar.fill_along(request, guess, rows)
                except Exception as error:  # noqa: BLE001  (its grammar's own failure)
                    rows[:] = ALL
                    request.fail(error)
            start += len(guess) + 1
        kept = super().accept(self.grammar.masked(logits, block.to(logits.device)), requests,
                              guesses)
        return [k[:d] if d else k for k, d in zip(kept, dead)]

    def draws_ahead(self, requests: Sequence) -> bool:
        """No decode ahead of a batch with a constrained request: its mask needs this step's
        token on the host."""
        return not constrained(requests)
