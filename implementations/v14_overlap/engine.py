"""v13's engine with the next decode launched before a step's tokens are read back. A step
launches its passes, starts copying its tokens to the host, launches the decode of the step
after it for every request that may continue (the guess: all of them, but those whose next
token is their last), and only then waits for its tokens. The host's work of the next step
(scheduling, the lanes' inputs, postprocessing) runs while the GPU computes. A request that
stops at a stop token has had one more row computed for nothing; its blocks are freed as
before, and the row's token is never read."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial

import torch

from torchlet.contract import BuildOption, Checkpoint, RequestOutput

from ..v13_fused import OPTIONS as PREVIOUS_OPTIONS
from ..v13_fused import PrefixEngine, layers, prefix_build
from .runner import OverlapRunner


@dataclass
class Ahead:
    """A decode launched before the step before it was read back: its requests in row order,
    and the tokens it draws for them, on the device."""
    requests: list
    tokens: torch.Tensor

    def rows_of(self, requests: list) -> list[int] | None:
        """The rows of these requests (a subsequence: those still running), in their order;
        None when they are all of them."""
        if len(requests) == len(self.requests):
            return None
        row = {r.id: i for i, r in enumerate(self.requests)}
        return [row[r.id] for r in requests]


class OverlapEngine(PrefixEngine):
    ahead: Ahead | None = None

    def __init__(self, runner: OverlapRunner, scheduler, overlap: bool = True):
        super().__init__(runner, scheduler)
        self.overlap = overlap

    def step(self) -> list[RequestOutput]:
        """v03's step, with the next step's decode launched between this step's passes and the
        read-back of its tokens."""
        if not self.overlap:
            return super().step()
        ahead, self.ahead = self.ahead, None
        # The requests of a decode launched ahead hold their next tokens' blocks already:
        # only a step run in order may need v08's preemption.
        batch = self._schedule() if ahead is None else self.scheduler.schedule()
        if batch is None:
            return []
        tokens = self._tokens(batch, ahead)
        read = self.runner.start_read(tokens)
        self.ahead = self._decode_ahead(batch, tokens)
        for request in self.scheduler.postprocess(batch, read()):
            self.runner.cache.free(request.id)
        if self.ahead is not None:
            running = [r for r in self.ahead.requests if not r.finished]
            self.runner.seal_filled([r.id for r in running], [r.sequence for r in running])
        return [r.output() for r in batch.requests]

    def _tokens(self, batch, ahead: Ahead | None) -> torch.Tensor:
        """The batch's tokens on the device, in batch.requests order: the running requests'
        from the decode launched ahead, if one was, the admitted ones' from their prefill."""
        if ahead is None:
            return self._draws(batch, self._forward(batch))
        tokens = [self._pick(ahead.tokens, ahead.rows_of(batch.decode))] if batch.decode else []
        if batch.prefill:
            prefill = dataclasses.replace(batch, decode=[])
            tokens.append(self._draws(prefill, self._forward(prefill)))
        return tokens[0] if len(tokens) == 1 else torch.cat(tokens)

    def _pick(self, tokens: torch.Tensor, rows: list[int] | None) -> torch.Tensor:
        """tokens[rows] (all of them for None), the index staged as the decode inputs are."""
        if rows is None:
            return tokens
        return tokens.index_select(0, self.runner.staged(self.runner.host_longs(rows)))

    def _decode_ahead(self, batch, tokens: torch.Tensor) -> Ahead | None:
        """Launch the next decode of the requests whose token this step is not their last, fed
        these tokens on the device; None (the next step runs in order) when none may continue,
        or when their next tokens need more blocks than are free (v08's preemption decides)."""
        everyone = batch.requests  # a new list at each read
        rows = [i for i, r in enumerate(everyone) if len(r.tokens) + 1 < r.params.max_new_tokens]
        requests = everyone if len(rows) == len(everyone) else [everyone[i] for i in rows]
        ids = [r.id for r in requests]
        if not ids or self.runner.blocks_for_decode(ids) > self.runner.pool.num_free:
            return None
        if requests is not everyone:
            tokens = self._pick(tokens, rows)
        drawn = self.runner.decode_ahead(ids, [r.sequence for r in requests], tokens)
        return Ahead(requests, drawn)


OVERLAP_OPTIONS = (
    BuildOption("overlap", bool, True, "launch the next decode before reading a step's tokens "
                "back (False: v13's engine)"),
)
OPTIONS = PREVIOUS_OPTIONS + OVERLAP_OPTIONS


def build(checkpoint: Checkpoint, *, overlap: bool = True, **options):
    """v13's build and options over the overlapping runner and engine; overlap=False runs each
    step in order, as v13 does."""
    engine = partial(OverlapEngine, overlap=overlap)
    return prefix_build("v14", OverlapRunner, engine, layers, checkpoint, **options)

