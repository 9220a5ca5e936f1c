"""v15's runner, whose decodes may verify guesses: one pass computes each decoding request's
last token and its guesses as rows of a slice (v12's pass over the paged cache, in a slice
graph where v15 replays one), the LM head runs on every one of those rows, and the sampler keeps
the guesses the logits agree with and one token of the engine's own. The K/V of the rows after
the kept ones is rolled back.

Where the batch guesses nothing this is v15's runner, graphs and all."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import torch

from ..v16_tensor_parallel import ChunkedRunner

PAD = -1  # fills a row of kept tokens out to guesses + 1


class SpeculativeRunner(ChunkedRunner):
    SERVES = ChunkedRunner.SERVES + ("speculation_stats",)

    def __init__(self, *parts, proposer, **options):
        super().__init__(*parts, **options)
        self.proposer = proposer
        self.meter = Counter(verify_passes=0, requests=0, proposed=0, accepted=0, tokens=0)

    @classmethod
    def assemble(cls, a) -> "SpeculativeRunner":
        return cls(a.checkpoint, a.device, a.dtype, a.model, a.kv, a.inputs, a.sampler,
                   proposer=a.proposer, use_graphs=a.options["use_graphs"])

    def run(self, batch) -> torch.Tensor:
        """v15's tokens, one a request, where the batch guesses nothing; else, on the host, a row
        a request of the tokens it keeps (padded with PAD to guesses + 1): the decodes' from one
        verifying pass, then the prefills' first tokens. Where the proposer has no guess for any
        decode, the step is v15's (its decode graph), its tokens padded into rows."""
        if not batch.guesses:
            return super().run(batch)
        proposals = self.proposals(batch.decode, batch.guesses)
        if not any(proposals):
            return torch.tensor([[t] + [PAD] * batch.guesses
                                 for t in super().run(batch).tolist()])
        rows = self.verify(batch.decode, proposals, batch.guesses)
        if batch.prefill:
            rows += [[t] + [PAD] * batch.guesses for t in self.prefill_tokens(batch).tolist()]
        return torch.tensor(rows)

    def proposals(self, requests: Sequence, k: int) -> list[list[int]]:
        """The proposer's guesses, at most k, and no more than each request may still take after
        the token the pass gives it anyway."""
        return [list(p[:max(r.params.max_new_tokens - len(r.tokens) - 1, 0)])
                for r, p in zip(requests, self.proposer.propose(requests, k), strict=True)]

    @torch.inference_mode()
    def verify(self, requests: Sequence, proposals: Sequence[Sequence[int]],
               k: int) -> list[list[int]]:
        """The proposals, as far as free blocks hold their rows, computed with each request's
        last token in one pass; per request the tokens it keeps, padded with PAD to k + 1."""
        self.kv.grow(requests)  # each one's own row: the scheduler kept room for it
        guesses = []
        for request, proposal in zip(requests, proposals, strict=True):
            guess = list(proposal[:self.kv.extend(request, len(proposal))])
            request.guess(guess)
            guesses.append(guess)
        hidden, _ = self.forward_rows(requests, [len(r.sequence) for r in requests])
        kept = self.sampler.accept(self.model.lm_head(self.weights, hidden).float(), requests,
                                   guesses)
        for request, guess, tokens in zip(requests, guesses, kept):
            # rows kept: its last token's and those of the guesses it keeps (all but the last
            # token kept, which is the engine's own and has no row yet)
            keep = len(request.sequence) - len(guess) + len(tokens) - 1
            self.kv.roll_back(request, keep)
            request.settle()
            request.computed = keep
        self.meter.update(verify_passes=1, requests=len(requests),
                          proposed=sum(map(len, guesses)),
                          accepted=sum(len(t) - 1 for t in kept), tokens=sum(map(len, kept)))
        return [t + [PAD] * (k + 1 - len(t)) for t in kept]

    def speculation_stats(self) -> dict[str, int]:
        return dict(self.meter)
