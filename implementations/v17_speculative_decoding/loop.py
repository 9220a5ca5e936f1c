"""v16's engine, which runs a step in order where it guesses: the next decode's inputs are the
tokens the step keeps, and only the host knows how many those are once it has read them back,
so no decode can be launched ahead of it (v14's overlap). A step that guesses nothing overlaps
as before; the policy's rule (policy.py) decides which a step is. The tokens a decode launched
ahead drew are the sampler's to settle before a step takes them (settle: v17's keeps them)."""
from __future__ import annotations

from torchlet.contract import Served

from ..v16_tensor_parallel import TensorParallelEngine


class SpeculativeEngine(TensorParallelEngine):
    speculation_stats = Served("runner")  # the speculative capability

    @classmethod
    def assemble(cls, a) -> "SpeculativeEngine":
        engine = super().assemble(a)
        engine.overlaps = engine.overlap  # what the build asked; overlap is then set a step
        return engine

    def step(self):
        """v16's step; in order (v14's own switch, overlap) where it guesses and no decode was
        launched ahead of it."""
        self.overlap = self.overlaps and (self.ahead is not None or not self.scheduler.guesses())
        return super().step()

    def _decode_ahead(self, batch, tokens):
        """v14's decode launched ahead, unless the next step guesses: it runs in order."""
        if self.scheduler.guesses():
            return None
        return super()._decode_ahead(batch, tokens)

    def _tokens(self, batch, ahead):
        """v14's, where a decode launched ahead drew the tokens once the sampler has settled
        them: it may draw again now that the host has read the step before (a grammar's masks
        follow the tokens it has read)."""
        if ahead is not None:
            ahead.tokens = self.sampler.settle(ahead.requests, ahead.logits, ahead.tokens)
        return super()._tokens(batch, ahead)
