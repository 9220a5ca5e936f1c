"""Admission over a block pool: v04's rule (FCFS, max running, step token budget), and only as
many requests as free lanes and free blocks can hold once this step's decodes have taken the
blocks they need. A request the pool could never hold is refused when it arrives, and so is one
whose recompute after a preemption (scheduler.py) could never be admitted."""
from __future__ import annotations

import itertools
from collections import deque

from torchlet.contract import RequestError

from ..v07_cuda_graph import ContinuousBatching, Request


class PagedAdmission:
    OPTIONS = ContinuousBatching.OPTIONS

    def __init__(self, inner: ContinuousBatching, kv):
        self.inner, self.kv = inner, kv

    @classmethod
    def assemble(cls, a) -> "PagedAdmission":
        return cls(ContinuousBatching.assemble(a), a.kv)

    def check(self, request: Request) -> None:
        """v04's refusals, and a request the pool could never hold (the K/V memory's
        check_alone) or one whose recompute could never be admitted."""
        self.inner.check(request)
        self.kv.check_alone(request)
        # A preempted request comes back as one prefill of all its tokens. If that could
        # exceed the step budget it would wait at the head of the queue forever, so when the
        # pool is too small for every lane's longest sequence (preemption can happen) refuse
        # it now. The default pool never preempts, and then v04's rule alone holds.
        longest = len(request.prompt) + request.params.max_new_tokens - 1
        if self.kv.can_preempt() and longest > self.inner.max_step_tokens:
            raise RequestError(
                f"prompt ({len(request.prompt)} tokens) + max_new_tokens "
                f"({request.params.max_new_tokens}): if preempted it would be recomputed in one "
                f"step of up to {longest} tokens, more than max_step_tokens="
                f"{self.inner.max_step_tokens}, and could never run again")

    def admit(self, waiting: deque[Request], running: list[Request]) -> int:
        free = self.kv.free_after_decode(running)
        lanes = self.kv.num_free()
        count = 0
        for request in itertools.islice(waiting, self.inner.admit(waiting, running)):
            needed = self.kv.blocks_needed(len(request.sequence))
            if count == lanes or needed > free:
                break
            free, count = free - needed, count + 1
        return count
