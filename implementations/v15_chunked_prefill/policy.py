"""The policy of one token budget a step: v08's admission, with v04's limits, under one change: a
prompt longer than the step's budget is no longer refused, since it need not fit one step. The
scheduler (scheduler.py) asks it for the budget and whether the request at the head of the queue
may join."""
from __future__ import annotations

from torchlet.contract import MAX_RUNNING, MAX_STEP_TOKENS, BuildOption

from ..v14_overlap import ContinuousBatching, PagedAdmission

# Rows a step computes by default: enough for a step to keep a GPU busy, few enough that a long
# prompt arriving delays the running requests' next tokens by a step of this size at most.
DEFAULT_BUDGET = 2048


class TokenBudget(PagedAdmission):
    """v08's admission under a token budget a step that prompts share in slices."""

    OPTIONS = (
        ContinuousBatching.OPTIONS[0],
        BuildOption("max_step_tokens", int, None, "rows one step may compute, decodes and prompt "
                    f"slices together (None: {DEFAULT_BUDGET}, or max_running if that is more)",
                    MAX_STEP_TOKENS, minimum=1),
    )

    @classmethod
    def assemble(cls, a) -> "TokenBudget":
        """v04's limits (which refuse a budget below max_running: every running request may
        decode in one step), the budget's default DEFAULT_BUDGET."""
        running, budget = a.options[MAX_RUNNING], a.options[MAX_STEP_TOKENS]
        budget = max(DEFAULT_BUDGET, running) if budget is None else budget
        return cls(ContinuousBatching(running, budget), a.kv)

    @property
    def budget(self) -> int:
        return self.inner.max_step_tokens

    def check(self, request) -> None:
        """Only what the pool could never hold is refused: a prompt longer than the budget, or
        a recompute that is, is computed in slices."""
        self.kv.check_alone(request)

    def admits(self, request, running: list) -> bool:
        """Whether the request at the head of the queue may join now: within max_running, a
        lane free, and free blocks (less those the decodes take) for its whole sequence, counted
        as if nothing were cached, as v08 counts them."""
        free = self.kv.free_after_decode([r for r in running if not r.prefilling])
        return (len(running) < self.inner.max_running and self.kv.num_free() > 0
                and self.kv.blocks_needed(len(request.sequence)) <= free)
