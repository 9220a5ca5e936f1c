"""A request and its lifecycle. State lives on the request, so the scheduler reads like prose."""
from __future__ import annotations

from dataclasses import dataclass, field

from torchlet.contract import (FinishReason, GenerationParams, RequestError, RequestOutput,
                               RequestState, TokenView)


@dataclass
class Request:
    id: int
    prompt: list[int]
    params: GenerationParams
    tokens: list[int] = field(default_factory=list)
    state: RequestState = RequestState.WAITING
    finish_reason: FinishReason | None = None
    # What ended it, when its own work raised in a step (finish_reason ERROR).
    error: Exception | None = field(default=None, repr=False, compare=False)
    # The prompt as outputs show it: copied once, since it never changes, where copying it for
    # every output cost each step a pass over every running request's prompt.
    shown_prompt: list[int] = field(init=False, repr=False, compare=False)
    # The prompt, then the tokens, in one list grown with each token: every step reads each
    # running request's length and last token, and concatenating them anew cost each step a
    # pass over every running request's whole context. Read it; never change it.
    sequence: list[int] = field(init=False, repr=False, compare=False)
    # Tokens of the sequence whose K/V the request holds: the runner counts them as it writes.
    computed: int = field(default=0, repr=False, compare=False)

    def __post_init__(self):
        self.shown_prompt = list(self.prompt)
        self.sequence = self.prompt + self.tokens

    @property
    def finished(self) -> bool:
        return self.state is RequestState.FINISHED

    def append(self, token: int) -> None:
        """Take a new token; finish if it is a stop or eos id, or the last one allowed."""
        assert self.state is RequestState.RUNNING, f"request {self.id} is {self.state.value}"
        self.tokens.append(token)
        self.sequence.append(token)
        reason = self.params.stops_at(token)
        if reason is None and len(self.tokens) >= self.params.max_new_tokens:
            reason = FinishReason.LENGTH
        if reason is not None:
            self.finish(reason)

    def finish(self, reason: FinishReason) -> None:
        self.state, self.finish_reason = RequestState.FINISHED, reason

    def fail(self, error: Exception) -> None:
        """Finish with ERROR: its own work raised, and it alone ends."""
        self.error = error
        self.finish(FinishReason.ERROR)

    def raise_if_failed(self) -> None:
        """RequestError naming the cause, for generate and stream, if a step failed it."""
        if self.error is not None:
            raise RequestError(f"request {self.id} failed in a step, taking its token "
                               f"{len(self.tokens)}: {self.described_error}") from self.error

    @property
    def described_error(self) -> str | None:
        return None if self.error is None else f"{type(self.error).__name__}: {self.error}"

    def output(self) -> RequestOutput:
        """What callers hold never changes under them: the prompt list that outputs share is
        never written, and the tokens are a view of the first len(tokens) of a list only ever
        appended to (a copy of each running request's tokens cost every step a pass over
        them all)."""
        return RequestOutput(self.id, self.shown_prompt, TokenView(self.tokens), self.state,
                             self.finish_reason, self.described_error)
