"""v17's sampler, whose draws take only the tokens each request's grammar allows: the grammar
part's masks (grammar.py) applied to the logits before temperature, the filters and the race,
in every way the engine draws: a prefill's first token (draw), a decode step run in order (the
"masked" graphs, reading a bitmask per lane the step's requests fill just before the replay),
a decode launched ahead of the step before's read-back (settle), and a verifying pass's rows
(accept, each row masked after the guesses before it).

A decode launched ahead (v14) runs before the host has the token its masks follow: it replays
v17's unmasked graphs, and once the host has read that token, settle() fills the constrained
requests' masks (while the GPU still computes the launch) and draws their rows again from the
launch's logits, on the device, before anything reads them. An unconstrained step reads no
mask."""
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
    def __init__(self, num_lanes: int, device, acceptance: str = "exact", grammar=None, *,
                 argmax=None):
        super().__init__(num_lanes, device, acceptance, argmax=argmax)
        self.grammar = grammar
        # A lane's mask, read by the masked graphs: every token until a step fills it.
        self.bitmask = torch.full((num_lanes, grammar.words), ALL, dtype=torch.int32,
                                  device=device)

    @classmethod
    def assemble(cls, a) -> "GrammarSampler":
        return cls(a.kv.num_lanes, a.device, a.options["acceptance"], a.grammar,
                   argmax=a.model.ops.argmax)

    def draw(self, logits: torch.Tensor, requests: Sequence) -> torch.Tensor:
        """v11's eager draws (a prefill's first tokens), each row masked by its request's
        grammar."""
        if constrained(requests):
            logits = self.grammar.masked(logits, self.grammar.masks(requests).to(logits.device))
        return super().draw(logits, requests)

    def variant(self, lanes: Sequence[int], requests: Sequence) -> str:
        """v11's choice, masked where a request of the step has a grammar and the host has the
        token the step feeds it: its lanes' masks are written first (the other lanes' rows
        allow every token or hold an earlier step's mask, whose draws nothing reads). A decode
        launched ahead feeds tokens the host has not read (every token it knows is computed):
        v11's choice, the draws settle() makes again."""
        unmasked = super().variant(lanes, requests)
        if not constrained(requests) or all(r.computed == len(r.sequence) for r in requests):
            return unmasked
        rows = self.on_device([r.lane for r in requests])
        self.bitmask.index_copy_(0, rows, self.on_device(self.grammar.masks(requests)))
        return next(masked for masked, way in MASKED.items() if way == unmasked)

    def settle(self, requests: Sequence, logits: torch.Tensor,
               drawn: torch.Tensor) -> torch.Tensor:
        """The rows of the running constrained requests drawn again from the launch's logits,
        masked now that the host has their tokens, as the masked graphs draw (at the position
        after the launch's fed token: len(sequence) now that the host has it); the others'
        draws as they are. Nothing waits for the GPU: the masks are filled while it computes
        the launch, and the copies go from pinned memory."""
        rows = [i for i, r in enumerate(requests)
                if r.params.grammar is not None and not r.finished]
        if not rows:
            return drawn
        chosen = [requests[i] for i in rows]
        bitmask = self.grammar.masks(chosen)
        lanes = [r.lane for r in chosen]
        index = self.on_device([rows, lanes, [len(r.sequence) for r in chosen]])
        way = super().variant(lanes, chosen)
        settings = [t.index_select(0, index[1]) for t in super().lane_tensors(way)]
        masked = self.grammar.masked(logits.index_select(0, index[1]), self.on_device(bitmask))
        again = super().draw_lanes(way, masked, index[2], *settings)
        return drawn.index_copy(0, index[0], again.to(drawn.dtype))

    def on_device(self, host) -> torch.Tensor:
        """A host tensor (or nested lists of ints) on the lanes' device, copied without waiting
        for the work queued before it: from pinned memory on a GPU."""
        host = host if isinstance(host, torch.Tensor) else torch.tensor(host, dtype=torch.long)
        if self.bitmask.device.type != "cuda":
            return host
        return host.pin_memory().to(self.bitmask.device, non_blocking=True)

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

    def draws_rows_alone(self, requests: Sequence) -> bool:
        """Not where a request has a grammar: each of its rows is masked after the guesses
        before it, which accept() walks its matcher through."""
        return not constrained(requests) and super().draws_rows_alone(requests)

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

