"""The grammar part: per constrained request, a matcher of its GenerationParams.grammar kept in
step with the request's tokens, and the masks of its next draws.

A matcher is made at the request's first draw and caught up with its tokens at each fill (it
takes the tokens the request has taken since, whichever way they came: a prefill's first draw,
a decode, the guesses a verifying pass kept), so nothing but the request's own token list says
where it is. A preempted request recomputes its K/V, not its tokens: its matcher stays.

The bitmask is the contract's (torchlet.contract.grammar): int32 words, bit t % 32 of word
t // 32 for token t. masked() unpacks it into a boolean row per request and sets the logits of
the tokens it leaves out to -inf, before temperature and the filters, so a draw the grammar
allows is the draw of the unconstrained run (v11's race over p / E keeps its winner when other
tokens drop out)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from torchlet.contract import FinishReason, RequestError, bitmask_words

ALL = -1  # a word with every bit set: a row of them allows every token


@dataclass
class Tracked:
    """A constrained request's matcher, and how many of the request's tokens it has taken."""
    request: object
    matcher: object
    taken: int = 0


def stops_of(params) -> tuple[int, ...]:
    """The tokens that end the request, which a complete grammar allows next."""
    eos = () if params.ignore_eos else params.eos_token_ids
    return tuple(eos) + tuple(params.stop_token_ids)


class GrammarMasks:
    def __init__(self, vocab_size: int, pinned: bool = False):
        self.vocab_size, self.words = vocab_size, bitmask_words(vocab_size)
        self.pinned = pinned  # host blocks a GPU copies from without waiting for its stream
        self.tracked: dict[int, Tracked] = {}  # by request id: the constrained, unfinished ones

    @classmethod
    def assemble(cls, a) -> "GrammarMasks":
        return cls(a.config.vocab_size, pinned=a.device.type == "cuda")

    def block(self, rows: int) -> torch.Tensor:
        """A host bitmask of `rows` rows, to fill."""
        return torch.empty(rows, self.words, dtype=torch.int32, pin_memory=self.pinned)

    def masks(self, requests: Sequence) -> torch.Tensor:
        """A host bitmask, row i what requests[i]'s grammar allows next (every token where it
        has none). A request whose grammar allows no token is finished here, its row left
        allowing all, so its draw is finite and unread: STOP where the grammar is complete (it
        has no stop id to end on), else failed with the grammar named. So is one whose matcher
        raises. The rows left empty are found in one pass over the block, not one a row: at
        batch 64 the per-row checks cost as much as the fills."""
        self.forget_finished()
        # each row written once: a matcher's fill writes its whole row (its vocabulary's words,
        # zeros past them), so only the unconstrained rows are set to every token (a fill of the
        # whole block first wrote a constrained row twice: most of masks()'s time at batch 64
        # and 151,936 ids)
        bitmask = self.block(len(requests))
        # the block's numpy view: its row writes and its any() cost a fraction of torch's (the
        # any 0.05 against 0.6 ms at batch 64 and 151,936 ids on this CPU)
        words = bitmask.numpy()
        for i, request in enumerate(requests):
            if request.params.grammar is None:
                words[i] = ALL
                continue
            try:
                self.caught_up(request).fill(bitmask[i])
            except Exception as error:  # noqa: BLE001  (its grammar's own failure: it alone ends)
                words[i] = ALL
                request.fail(error)
        for i in np.flatnonzero(~words.any(axis=1)).tolist():
            words[i] = ALL
            self.cannot_go_on(requests[i], self.tracked[requests[i].id].matcher)
        return bitmask

    def fill_along(self, request, guesses: Sequence[int], bitmask: torch.Tensor) -> int | None:
        """Rows 0..len(guesses) := the masks after the request's tokens, then after each guess
        in turn; past a guess the grammar refuses, or a stop token, every token (no row there
        is kept). The matcher is rolled back to where it was. Returns the first row whose
        grammar allows nothing, or None: the request cannot take that row's token, and at row 0
        it ends here, as fill() ends it."""
        matcher = self.caught_up(request)
        stops, taken, dead = stops_of(request.params), 0, None
        bitmask[:len(guesses) + 1] = ALL
        for row in range(len(guesses) + 1):
            matcher.fill(bitmask[row])
            if not bool(bitmask[row].any()):
                bitmask[row] = ALL
                dead = row
                break
            if row == len(guesses) or guesses[row] in stops or not matcher.accept(guesses[row]):
                break
            taken += 1
        matcher.rollback(taken)
        if dead == 0:
            self.cannot_go_on(request, matcher)
        return dead

    def masked(self, logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        """logits [rows, vocab] with each token its row's bitmask leaves out at -inf."""
        bits = torch.arange(32, dtype=torch.int32, device=bitmask.device)
        allowed = ((bitmask.unsqueeze(-1) >> bits) & 1).bool().flatten(-2)
        return logits.masked_fill(~allowed[..., :logits.shape[-1]], float("-inf"))

    def cannot_go_on(self, request, matcher) -> None:
        """A request its grammar lets take no token: STOP if complete, else it fails alone."""
        if matcher.completed():
            request.finish(FinishReason.STOP)
            return
        request.fail(RequestError(
            f"its grammar ({request.params.grammar.description}) allows no token of the "
            f"vocabulary after its {len(request.tokens)} tokens"))

    def caught_up(self, request):
        """The request's matcher, made on first use and given the tokens taken since."""
        tracked = self.tracked.get(request.id)
        if tracked is None or tracked.request is not request:
            matcher = request.params.grammar.matcher(stops_of(request.params))
            tracked = self.tracked[request.id] = Tracked(request, matcher)
        tokens = request.tokens
        while tracked.taken < len(tokens):
            token = tokens[tracked.taken]
            if not tracked.matcher.accept(token):
                raise RequestError(f"token {token} (its token {tracked.taken}) is not allowed "
                                   f"by its grammar ({request.params.grammar.description})")
            tracked.taken += 1
        return tracked.matcher

    def forget_finished(self) -> None:
        """Drop the matchers of finished requests: an engine that serves for days keeps only
        those of the requests still running."""
        if any(t.request.finished for t in self.tracked.values()):
            self.tracked = {i: t for i, t in self.tracked.items() if not t.request.finished}
