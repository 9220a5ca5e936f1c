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


class PagedAdmission:
    OPTIONS = ContinuousBatching.OPTIONS

    def __init__(self, inner: ContinuousBatching, kv):
        self.inner, self.kv = inner, kv

    @classmethod
    def assemble(cls, a) -> "PagedAdmission":
        return cls(ContinuousBatching.assemble(a), a.kv)

    def check(self, request: Request) -> None:
        """v04's refusals, and a request the pool could never hold (check_pool) or one whose
        recompute could never be admitted."""
        self.inner.check(request)
        self.check_pool(request)
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

    def check_pool(self, request: Request) -> None:
        """Refuse a request that could never finish, even alone in an empty pool."""
        self.kv.check_alone(request)

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


class PreemptingScheduler(Scheduler):
    SERVES = ("num_preemptions",)  # of the paged_kv capability, served on the engine
    num_preemptions = 0

    def schedule(self, reserved: bool = False) -> Batch | None:
        """v03's batch, less the running requests preempted, last admitted first, until the
        others' next tokens fit in the free blocks. reserved: they hold those blocks already (a
        decode launched ahead took them), and nobody is preempted."""
        batch = super().schedule()
        if batch is None or reserved:
            return batch
        decode = list(batch.decode)
        # Counted once and then less each victim's block: recounting every request per victim
        # made a step of n preemptions cost n passes over the running requests.
        needed = self.kv.blocks_for_decode(decode)
        while decode and needed > self.kv.num_free_blocks():
            victim = decode.pop()  # the running request admitted last
            needed -= self.kv.blocks_for_decode([victim])
            self.preempt(victim)
        return Batch(decode=decode, prefill=batch.prefill)

    def preempt(self, request: Request) -> None:
        """RUNNING -> WAITING, at the front of the queue, its blocks freed."""
        self.kv.free(request.id)
        self.running.remove(request)
        request.state = RequestState.WAITING
        self.waiting.appendleft(request)
        self.num_preemptions += 1
