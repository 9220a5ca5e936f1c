"""Admission and preemption over a block pool.

Admission: v04's rule (FCFS, max running, step token budget), and only as many requests as free
lanes and free blocks can hold once this step's decodes have taken the blocks they need.
Preemption: when the running requests' next tokens need more blocks than are free, the request
admitted last gives its blocks back and returns to the front of the waiting queue, keeping its
tokens; when it is admitted again its whole sequence is prefilled anew (recompute), so its
tokens are exactly what they would have been."""
from __future__ import annotations

import itertools
from collections import deque

from torchlet.contract import RequestError, RequestState

from ..v07_cuda_graph import Batch, ContinuousBatching, Request, Scheduler

__all__ = ["Batch", "ContinuousBatching", "PagedAdmission", "Scheduler", "preempt"]


class PagedAdmission:
    def __init__(self, inner: ContinuousBatching, runner):
        self.inner, self.runner = inner, runner

    def check(self, request: Request) -> None:
        """Refuse a request that could never finish, even alone in an empty pool."""
        self.inner.check(request)
        pool = self.runner.pool
        needed = pool.blocks_needed(len(request.prompt) + request.params.max_new_tokens)
        if needed > pool.num_usable:
            raise RequestError(
                f"prompt ({len(request.prompt)} tokens) + max_new_tokens "
                f"({request.params.max_new_tokens}) needs {needed} blocks of {pool.block_size} "
                f"tokens, but the pool has only {pool.num_usable}: it could never finish")
        # A preempted request comes back as one prefill of all its tokens. If that could
        # exceed the step budget it would wait at the head of the queue forever, so when the
        # pool is too small for every lane's longest sequence (preemption can happen) refuse
        # it now. The default pool never preempts, and then v04's rule alone holds.
        longest = len(request.prompt) + request.params.max_new_tokens - 1
        lane_blocks = pool.blocks_needed(self.runner.cache.max_len)
        can_preempt = pool.num_usable < self.runner.cache.num_lanes * lane_blocks
        if can_preempt and longest > self.inner.max_step_tokens:
            raise RequestError(
                f"prompt ({len(request.prompt)} tokens) + max_new_tokens "
                f"({request.params.max_new_tokens}): if preempted it would be recomputed in one "
                f"step of up to {longest} tokens, more than max_step_tokens="
                f"{self.inner.max_step_tokens}, and could never run again")

    def admit(self, waiting: deque[Request], running: list[Request]) -> int:
        pool = self.runner.pool
        free = pool.num_free - self.runner.blocks_for_decode([r.id for r in running])
        lanes = self.runner.cache.num_free()
        count = 0
        for request in itertools.islice(waiting, self.inner.admit(waiting, running)):
            needed = pool.blocks_needed(len(request.sequence))
            if count == lanes or needed > free:
                break
            free, count = free - needed, count + 1
        return count


def preempt(scheduler: Scheduler, request: Request) -> None:
    """RUNNING -> WAITING, at the front of the queue; the caller has freed its blocks."""
    scheduler.running.remove(request)
    request.state = RequestState.WAITING
    scheduler.waiting.appendleft(request)
