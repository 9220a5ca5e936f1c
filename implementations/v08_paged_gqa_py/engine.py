"""v07's engine over paged K/V memory. Each step, before decoding, the running requests' next
tokens take the blocks they need; if the pool cannot hold them, the request admitted last is
preempted (its blocks freed, its work recomputed later: v07's prefill of its whole sequence). It
adds block_tables(), paged_metadata(), pool_stats(), kv_bytes() and num_preemptions to the
contract, and decode_buffers() holds the paged inputs too."""
from __future__ import annotations

from functools import partial

import torch

from torchlet.contract import BLOCK_SIZE, NUM_BLOCKS, BuildOption, Checkpoint

from ..v07_cuda_graph import GRAPH_OPTIONS, GraphEngine, refuse_unknown_options, slot_limits
from . import metadata
from .model import layers as paged_model
from .runner import PagedRunner
from .scheduler import Batch, ContinuousBatching, PagedAdmission, Scheduler, preempt


class PagedEngine(GraphEngine):
    """v07's GraphEngine given a PagedRunner and a preempting step. decode_buffers() holds, by
    name, token_ids, positions and the paged ones: block_tables [lanes, max_blocks],
    context_lens and slot_mapping [lanes]."""

    def __init__(self, runner: PagedRunner, scheduler: Scheduler):
        super().__init__(runner, scheduler)
        self.num_preemptions = 0

    def _schedule(self) -> Batch | None:
        """v07's batch, less the running requests preempted, last admitted first, until the
        others' next tokens fit in the free blocks."""
        batch = super()._schedule()
        if batch is None:
            return None
        decode = list(batch.decode)
        # Counted once and then less each victim's block: recounting every request per victim
        # made a step of n preemptions cost n passes over the running requests.
        needed = self.runner.blocks_for_decode([r.id for r in decode])
        while decode and needed > self.runner.pool.num_free:
            victim = decode.pop()  # the running request admitted last
            needed -= self.runner.blocks_for_decode([victim.id])
            self.runner.cache.free(victim.id)
            preempt(self.scheduler, victim)
            self.num_preemptions += 1
        return Batch(decode=decode, prefill=batch.prefill)

    def block_tables(self) -> dict:
        """request id -> its block table (physical block ids, in logical order), for every
        request that holds blocks."""
        return {r: self.runner.pool.table(r) for r, _, _ in self.runner.cache.items()}

    def paged_metadata(self) -> metadata.PagedMetadata:
        """FlashInfer-style metadata (kv_indptr, kv_indices, kv_last_page_len, padded
        block_tables, context_lens) of the requests that hold blocks, in block_tables() order."""
        tables = self.block_tables()
        counts = [self.runner.pool.num_tokens(r) for r in tables]
        return metadata.build(list(tables.values()), counts, self.runner.pool.block_size)

    def pool_stats(self) -> dict[str, int]:
        pool = self.runner.pool
        return {"block_size": pool.block_size, "num_blocks": pool.num_blocks,
                "num_usable": pool.num_usable, "num_free": pool.num_free, "num_used": pool.num_used}

    def kv_bytes(self, request_id) -> int:
        """K/V bytes the request holds now: its blocks, nothing reserved beyond them."""
        return self.runner.cache.held_bytes(request_id)


# The options build's refusal names: v07's and the pool's.
PAGED_OPTIONS = GRAPH_OPTIONS + (
    BuildOption("num_blocks", int, None, "K/V blocks in the pool, the null block included (None: "
                "as much K/V memory as v07 reserves)", NUM_BLOCKS, minimum=2),
    BuildOption("block_size", int, 16, "tokens per block", BLOCK_SIZE, minimum=1),
    BuildOption("poison_free_blocks", bool, False, "fill every block nobody owns with NaN, at "
                "build and whenever it is freed"),
)


def paged_build(version: str, runner_class, engine_class, checkpoint: Checkpoint, *,
                device="cpu", dtype=torch.float32,
                max_decode_slots: int | None = None, max_running: int | None = None,
                max_step_tokens: int | None = None, max_model_len: int | None = None,
                poison_inactive_lanes: bool = False,
                use_graphs: bool = True, num_blocks: int | None = None, block_size: int = 16,
                poison_free_blocks: bool = False, model=paged_model, **options):
    """An engine_class over a runner_class (v05's slot_build, over the pool). v07's options,
    checked the same way (slot_limits), and the pool's: num_blocks (the null block included)
    defaults to as much K/V memory as v07 reserves; block_size is in tokens. A value of the wrong
    type or below its declared minimum never gets here: Version.build refuses it (check_build).
    poison_free_blocks fills every block nobody owns with NaN, at build and whenever it is freed.
    model is the decoder the runner calls (this version's layers, a PagedDecoder, unless another
    is given). version names the build in its refusals."""
    refuse_unknown_options(version, PAGED_OPTIONS, options)
    slots, budget = slot_limits(checkpoint, max_decode_slots, max_running, max_step_tokens,
                                max_model_len)
    runner = runner_class(checkpoint, device, dtype, max_model_len, slots,
                          poison_inactive_lanes, use_graphs, num_blocks, block_size, model,
                          poison_free_blocks)
    policy = PagedAdmission(ContinuousBatching(slots, budget), runner)
    return engine_class(runner, Scheduler(policy))


# This version's build: its options over the paged runner and the paged engine.
build = partial(paged_build, "v08", PagedRunner, PagedEngine)
