"""Continuous batching: the admission policy v03's scheduler asks "who joins this step?".

Every step, each running request decodes one token; then waiting requests join, first come first
served, while the running count stays within max_running and the step's rows (one per decode plus
each admitted prompt) within max_step_tokens. Prefill and decode share a step: the joiners'
prompts and the runners' last tokens go through the model in one mixed ragged pass. A request
that finishes leaves the batch at that step, so its room is free for the next step's admission.

Admission stops at the first request that does not fit: no later, smaller request overtakes it,
which is what bounds how long any request waits."""
from __future__ import annotations

from collections import deque

from torchlet.contract import MAX_RUNNING, MAX_STEP_TOKENS, BuildOption, RequestError

from ..v03_request_states import Request

DEFAULT_MAX_RUNNING = 16


class ContinuousBatching:
    OPTIONS = (
        BuildOption("max_running", int, DEFAULT_MAX_RUNNING, "requests running at once",
                    MAX_RUNNING, minimum=1),
        BuildOption("max_step_tokens", int, None, "rows one step may feed (None: the model's "
                    "context, or max_running if that is more)", MAX_STEP_TOKENS, minimum=1),
    )

    def __init__(self, max_running: int, max_step_tokens: int):
        if max_running < 1 or max_step_tokens < max_running:
            raise ValueError(
                f"need 1 <= max_running <= max_step_tokens (every running request decodes one "
                f"token a step), got max_running={max_running}, max_step_tokens={max_step_tokens}")
        self.max_running = max_running
        self.max_step_tokens = max_step_tokens

    @classmethod
    def assemble(cls, a) -> "ContinuousBatching":
        """max_step_tokens defaults to the model's context, so any acceptable prompt can be
        admitted (0 is refused, not taken for the default)."""
        running, budget = a.options["max_running"], a.options["max_step_tokens"]
        return cls(running, max(a.config.max_position, running) if budget is None else budget)

    def check(self, request: Request) -> None:
        """A prompt longer than a step's budget could never be admitted: refuse it now."""
        if len(request.prompt) > self.max_step_tokens:
            raise RequestError(
                f"prompt of {len(request.prompt)} tokens exceeds max_step_tokens="
                f"{self.max_step_tokens}: without chunked prefill it could never run")

    def admit(self, waiting: deque[Request], running: list[Request]) -> int:
        count, tokens = 0, len(running)  # the running requests' decode rows come first
        for request in waiting:
            if len(running) + count == self.max_running:
                break
            if tokens + len(request.sequence) > self.max_step_tokens:
                break
            count, tokens = count + 1, tokens + len(request.sequence)
        return count
