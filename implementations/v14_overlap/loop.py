"""v13's engine with the next decode launched before a step's tokens are read back. A step
launches its passes, starts copying its tokens to the host, launches the decode of the step
after it for every request that may continue (the guess: all of them, but those whose next
token is their last), and only then waits for its tokens. The host's work of the next step
(scheduling, the lanes' inputs, postprocessing) runs while the GPU computes. A request that
stops at a stop token has had one more row computed for nothing; its blocks are freed as
before, and the row's token is never read.

The step after a decode is launched with each lane's token id copied on the device from the
draws that made it (inputs.py: OverlapInputs)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import torch

from torchlet.contract import BuildOption, RequestOutput, RequestState

from ..v13_fused import Batch, StepEngine


@dataclass
class Launched:
    """A decode launched before the step before it was read back: its requests in row order,
    the tokens it draws for them, on the device, and the logits they are drawn from, by lane
    (the graph's output, until the next replay: a later sampler may draw again from them)."""
    requests: list
    tokens: torch.Tensor
    logits: torch.Tensor

    def rows_of(self, requests: list) -> list[int] | None:
        """The rows of these requests (a subsequence: those still running), in their order;
        None when they are all of them."""
        if len(requests) == len(self.requests):
            return None
        row = {r.id: i for i, r in enumerate(self.requests)}
        return [row[r.id] for r in requests]


class OverlapEngine(StepEngine):
    OPTIONS = (
        BuildOption("overlap", bool, True, "launch the next decode before reading a step's "
                    "tokens back (False: v13's engine)"),
    )
    ahead: Launched | None = None

    def __init__(self, *parts, inputs, overlap: bool = True):
        """v03's parts, and the decode inputs: a decode launched ahead is fed through them."""
        super().__init__(*parts)
        self.inputs, self.overlap = inputs, overlap

    @classmethod
    def assemble(cls, a) -> "OverlapEngine":
        return cls(a.runner, a.kv, a.scheduler, a.sampler, a.request, inputs=a.inputs,
                   overlap=a.options["overlap"])

    def step(self) -> list[RequestOutput]:
        """v03's step, with the next step's decode launched between this step's passes and the
        read-back of its tokens."""
        if not self.overlap:
            return super().step()
        ahead, self.ahead = self.ahead, None
        # The requests of a decode launched ahead hold their next tokens' blocks already:
        # only a step run in order may need v08's preemption.
        batch = self.scheduler.schedule(reserved=ahead is not None)
        if batch is None:
            return []
        tokens = self._tokens(batch, ahead)
        read = self.start_read(tokens)
        self.ahead = self._decode_ahead(batch, tokens)
        outputs = self.scheduler.postprocess(batch, read())
        if self.ahead is not None:
            running = RequestState.RUNNING
            self.kv.seal_filled([r for r in self.ahead.requests if r.state is running])
        return outputs

    def _tokens(self, batch: Batch, ahead: Launched | None) -> torch.Tensor:
        """The batch's tokens on the device, in batch.requests order: the running requests'
        from the decode launched ahead, if one was, the admitted ones' from their prefill."""
        if ahead is None:
            return self.runner.run(batch)
        tokens = [self._pick(ahead.tokens, ahead.rows_of(batch.decode))] if batch.decode else []
        if batch.prefill:
            tokens.append(self.runner.run(dataclasses.replace(batch, decode=[])))
        return tokens[0] if len(tokens) == 1 else torch.cat(tokens)

    def _pick(self, tokens: torch.Tensor, rows: list[int] | None) -> torch.Tensor:
        """tokens[rows] (all of them for None), the index staged as the decode inputs are."""
        if rows is None:
            return tokens
        return tokens.index_select(0, self.inputs.staged(rows))

    def _decode_ahead(self, batch: Batch, tokens: torch.Tensor) -> Launched | None:
        """Launch the next decode of the requests whose token this step is not their last, fed
        these tokens on the device; None (the next step runs in order) when none may continue,
        or when their next tokens need more blocks than are free (v08's preemption decides).
        Its logits are left in the graph's output (nothing reads them), and the blocks it fills
        unsealed: their hashes need the fed tokens, so step() seals them once it has read them."""
        everyone = batch.requests  # a new list at each read
        rows = [i for i, r in enumerate(everyone) if len(r.tokens) + 1 < r.params.max_new_tokens]
        requests = everyone if len(rows) == len(everyone) else [everyone[i] for i in rows]
        if not requests or self.kv.free_after_decode(requests) < 0:
            return None
        if requests is not everyone:
            tokens = self._pick(tokens, rows)
        # Each has computed all its known tokens: its lane feeds the next position, and the
        # token there is this step's draw, copied on the device over the last known one.
        inputs = self.inputs
        inputs.fed = tokens
        try:
            logits, drawn = self.runner.step_lanes(requests)
        finally:
            inputs.fed = None
        return Launched(requests, drawn.index_select(0, inputs.lanes), logits)

    @cached_property
    def read_back(self) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """A host buffer of one token per lane (pinned on a GPU) and the event that marks its
        copy: the same every step, since a step has read its tokens before the next copies."""
        pinned = self.runner.device.type == "cuda"
        host = torch.empty(self.kv.num_lanes, dtype=torch.long, pin_memory=pinned)
        return host, torch.cuda.Event() if pinned else None

    def start_read(self, tokens: torch.Tensor) -> Callable[[], list[int]]:
        """Start copying tokens (at most one a lane) to the host; returns the wait for them, as
        ints. On a GPU the copy goes to pinned memory behind an event: work launched after it
        does not delay it, where tolist() would wait for the whole stream."""
        buffer, copied = self.read_back
        host = buffer[:tokens.shape[0]]
        host.copy_(tokens, non_blocking=True)
        if copied is not None:
            copied.record()

        def wait() -> list[int]:
            if copied is not None:
                copied.synchronize()
            return host.tolist()
        return wait
