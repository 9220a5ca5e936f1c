"""One token budget a step: decodes first, then prompts in slices.

The budget and who may join are the policy's (policy.py: TokenBudget). What a step computes is
the scheduler's plan (ChunkedScheduler.schedule):
1. every running request past its prompt decodes, one row each; if their next tokens need more
   blocks than are free, the request admitted last gives its blocks back (v08's preemption;
   here it may be one still in its prompt, which then starts its prompt again later);
2. the budget's other rows go to the next slices of the prompts being computed, oldest first;
3. while rows are left, waiting requests are admitted (first come, first served, within v08's
   limits on lanes and blocks) and given the K/V memory for their whole sequence at once: with
   the prefix cache their cached prefix counts as computed. Each takes the next slice.
A slice that ends its request's sequence samples its first token; the others sample nothing."""
from __future__ import annotations

from dataclasses import dataclass, field

from torchlet.contract import RequestState

from ..v14_overlap import Batch, PreemptingScheduler


@dataclass
class SlicedBatch(Batch):
    """v03's batch whose prefills are slices: prefill[i] computes rows[i] rows of its sequence,
    from its row `computed` on, to ends[i]. requests (those given a token, in row order) are the
    decodes and the prefills whose slice ends their sequence. (v03's `chunks`, whole sequences,
    is what v03's runner feeds; the paged runners read the requests and ends.)"""

    rows: list[int] = field(default_factory=list)

    def __post_init__(self):
        self.ends = [r.computed + n for r, n in zip(self.prefill, self.rows, strict=True)]
        self.sampled = [r for r, end in zip(self.prefill, self.ends) if end == len(r.sequence)]
        self.requests = self.decode + self.sampled
        self.num_prefill_tokens = sum(self.rows)


class ChunkedScheduler(PreemptingScheduler):
    def schedule(self, reserved: bool = False) -> SlicedBatch | None:
        """This step's plan: the decodes (after v08's preemption, unless reserved: a decode
        launched ahead holds their blocks), then slices of the prompts being computed, oldest
        first, then the admitted requests' first slices, within the policy's budget."""
        decode = [r for r in self.running if not r.prefilling]
        if not reserved:
            needed = self.kv.blocks_for_decode(decode)
            while decode and needed > self.kv.num_free_blocks():
                victim = self.running[-1]  # admitted last, in its prompt or past it
                if not victim.prefilling:
                    decode.remove(victim)
                    needed -= self.kv.blocks_for_decode([victim])
                self.preempt(victim)
        left = self.policy.budget - len(decode)
        prefill = [r for r in self.running if r.prefilling]
        while left > sum(r.prefill_to - r.computed for r in prefill) and self.waiting and \
                self.policy.admits(self.waiting[0], self.running):
            prefill.append(self.admit())
        rows = []
        for request in prefill:
            rows.append(min(request.prefill_to - request.computed, left))
            left -= rows[-1]
        while prefill and not rows[-1]:  # the budget ran out before them: they wait a step
            prefill.pop(), rows.pop()
        batch = SlicedBatch(decode=decode, prefill=prefill, rows=rows)
        return batch if batch.requests or batch.prefill else None

    def admit(self):
        """The request at the head of the queue runs, holding a lane and the blocks of its whole
        sequence (sharing its cached prefix, which counts as computed from now on)."""
        request = self.waiting.popleft()
        self.kv.place_cached([request])  # place() where prefixes are not shared
        request.state = RequestState.RUNNING
        request.prefill_to = len(request.sequence)
        self.running.append(request)
        return request
