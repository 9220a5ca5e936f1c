"""Preemption over a block pool: when the running requests' next tokens need more blocks than are
free, the request admitted last gives its blocks back and returns to the front of the waiting
queue, keeping its tokens; when it is admitted again its whole sequence is prefilled anew
(recompute), so its tokens are exactly what they would have been. Who is admitted is the policy's
question (policy.py: PagedAdmission, over free lanes and free blocks)."""
from __future__ import annotations

from torchlet.contract import RequestState

from ..v07_cuda_graph import Batch, Request, Scheduler


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
