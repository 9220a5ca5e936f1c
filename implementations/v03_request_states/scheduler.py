"""The scheduler owns the lifecycle: it decides who runs each step and what rows each request
brings (a whole prompt to prefill, or its last token to decode), then takes the chosen tokens
back. Who may join the running batch is the admission policy's one question (policy.py: this
version's answer is static batching)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from torchlet.contract import FinishReason, RequestOutput, RequestState

from .request import Request


@dataclass(frozen=True)
class StepStats:
    """What one step ran. Ids in row order; waiting_ids in admission order."""

    step: int
    prefill_ids: tuple[int, ...]
    decode_ids: tuple[int, ...]
    waiting_ids: tuple[int, ...]
    num_prefill_tokens: int
    finished_ids: tuple[int, ...] = ()

    @property
    def num_decode_tokens(self) -> int:
        return len(self.decode_ids)

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def num_running(self) -> int:
        return len(self.prefill_ids) + len(self.decode_ids)


@dataclass
class Batch:
    """One step's work: running requests decode one token, newly admitted ones prefill."""

    decode: list[Request] = field(default_factory=list)
    prefill: list[Request] = field(default_factory=list)
    # Both, in row order: decodes first. A batch is made whole and never changed.
    requests: list[Request] = field(init=False, repr=False)
    # The prompt rows its prefills compute (their whole sequences), counted before their tokens.
    num_prefill_tokens: int = field(init=False, repr=False)

    def __post_init__(self):
        self.requests = self.decode + self.prefill
        self.num_prefill_tokens = sum(len(r.sequence) for r in self.prefill)

    @property
    def chunks(self) -> list[list[int]]:
        """The new rows of each request, in order: its last token, or its whole sequence (the
        prompt, or all the tokens of a request a scheduler preempted, which are recomputed)."""
        return [[r.sequence[-1]] for r in self.decode] + [r.sequence for r in self.prefill]


class Scheduler:
    """Who runs each step, over the K/V memory it is given: the policy admits, and a request
    that finishes or is aborted gives its K/V back here."""

    def __init__(self, policy, kv):
        self.policy, self.kv = policy, kv
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.steps = 0
        self.last_stats: StepStats | None = None

    @classmethod
    def assemble(cls, a) -> "Scheduler":
        return cls(a.policy, a.kv)

    def check(self, request: Request) -> None:
        """RequestError if the policy could never admit the request; changes nothing, so the
        loop can check all of a call's prompts before it queues any."""
        self.policy.check(request)

    def add(self, request: Request) -> None:
        self.check(request)
        self.waiting.append(request)

    def schedule(self) -> Batch | None:
        """This step's batch: every running request decodes, then the admitted ones prefill."""
        admitted = []
        for _ in range(self.policy.admit(self.waiting, self.running)):
            request = self.waiting.popleft()
            request.state = RequestState.RUNNING
            admitted.append(request)
        batch = Batch(decode=list(self.running), prefill=admitted)
        self.running.extend(admitted)
        return batch if batch.requests else None

    def postprocess(self, batch: Batch, tokens: list[int]) -> list[RequestOutput]:
        """Give each request its token; finished ones leave the running batch now and free their
        K/V. Returns a copy of every request's output. The one place a step runs a request's own code (its stop check): if
        that raises, the request fails alone and leaves like any finished one."""
        for request, token in zip(batch.requests, tokens, strict=True):
            if request.finished:  # it failed earlier in this step (a sampler's bind): no token
                continue
            try:
                request.append(token)
            except Exception as error:  # noqa: BLE001  (whatever its settings raise)
                request.fail(error)
        finished = [r for r in batch.requests if r.finished]
        for request in finished:
            self.kv.free(request.id)
        self.running = [r for r in self.running if not r.finished]
        self.steps += 1
        self.last_stats = StepStats(
            step=self.steps, prefill_ids=tuple(r.id for r in batch.prefill),
            decode_ids=tuple(r.id for r in batch.decode),
            waiting_ids=tuple(r.id for r in self.waiting),
            num_prefill_tokens=batch.num_prefill_tokens,
            finished_ids=tuple(r.id for r in finished))
        return [r.output() for r in batch.requests]

    def abort(self, request: Request) -> None:
        """Finish a waiting or running request and free its K/V."""
        if request.finished:
            return
        if request.state is RequestState.WAITING:
            self.waiting.remove(request)
        else:
            self.running.remove(request)
        request.finish(FinishReason.ABORTED)
        self.kv.free(request.id)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)
