"""v15's scheduler, whose batch says how many tokens its decodes guess (the policy's answer for
the step), and which hands a request every token a verifying pass kept."""
from __future__ import annotations

from dataclasses import dataclass

from ..v16_tensor_parallel import ChunkedScheduler, SlicedBatch


@dataclass
class SpeculativeBatch(SlicedBatch):
    """v15's batch; its decodes may each guess up to `guesses` tokens (0: plain decodes)."""

    guesses: int = 0


class SpeculativeScheduler(ChunkedScheduler):
    def guesses(self) -> int:
        """Guesses per request the next step makes, by the policy's rule, for the requests
        running and waiting now."""
        return self.policy.guesses(self.running, self.waiting)

    def schedule(self, reserved: bool = False) -> SpeculativeBatch | None:
        """v15's plan, its decodes guessing what guesses() answers before it (what the loop
        asked when it chose to run the step in order); none where a decode launched ahead holds
        the blocks (reserved: that step's tokens come one a request)."""
        guesses = 0 if reserved else self.guesses()
        batch = super().schedule(reserved)
        if batch is None:
            return None
        return SpeculativeBatch(decode=batch.decode, prefill=batch.prefill, rows=batch.rows,
                                guesses=guesses if batch.decode else 0)

    def postprocess(self, batch, tokens: list):
        """Where the batch guessed, each request's row of tokens ends with the one v03's
        postprocess hands it; the ones before it (guesses it kept) are taken first, each with
        the stop checks of append. A request that finishes on one of them takes no more. The
        policy hears what the step's decodes kept (it rests where passes keep too few)."""
        if batch.decode:
            self.policy.observe(batch.guesses, [sum(t >= 0 for t in row) for row in tokens]
                                if batch.guesses else [])
        if batch.guesses:
            last = []
            for request, row in zip(batch.requests, tokens, strict=True):
                kept = [t for t in row if t >= 0]  # a row is padded with -1
                if not request.finished:
                    try:
                        request.extend(kept[:-1])
                    except Exception as error:  # noqa: BLE001  (whatever its settings raise)
                        request.fail(error)
                last.append(kept[-1])
            tokens = last
        return super().postprocess(batch, tokens)
