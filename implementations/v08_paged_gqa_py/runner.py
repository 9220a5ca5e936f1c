"""v07's graphed runner over paged K/V memory. Prefill takes a request's blocks (and a decode
lane) and writes its K/V through its table; each decode step first grows every request by one
token (reserve_decode: a new block only when its last one is full), then replays the graph of the
step, which stores and reads K/V through the lanes' block tables."""
from __future__ import annotations

from functools import cached_property
from typing import Hashable, Sequence

import torch

from torchlet.contract import Checkpoint, RequestError

from ..v07_cuda_graph import GraphedRunner
from .model import layers as paged_model
from .buffers import PagedDecodeBuffers
from .cache import PagedCache


class PagedRunner(GraphedRunner):
    cache_class = PagedCache  # a later version's cache may manage the same pool otherwise

    def __init__(self, checkpoint: Checkpoint, device="cpu", dtype=torch.float32,
                 max_len: int | None = None,
                 num_slots: int = 8, poison_inactive_lanes: bool = False, use_graphs: bool = True,
                 num_blocks: int | None = None, block_size: int = 16, model=paged_model,
                 poison_free_blocks: bool = False):
        """GraphedRunner's arguments and the pool's. The pool's are kept before GraphedRunner's
        constructor runs, since it calls make_cache and make_buffers, which read them."""
        self.num_blocks, self.block_size = num_blocks, block_size
        self.poison_free_blocks = poison_free_blocks
        super().__init__(checkpoint, device, dtype, max_len, num_slots, poison_inactive_lanes,
                         use_graphs, model=model)

    def max_blocks(self, max_len: int) -> int:
        """Blocks a request of max_len tokens holds: the width of a lane's block table."""
        return -(-max_len // self.block_size)

    def make_cache(self, num_slots: int, max_len: int, dtype) -> PagedCache:
        """num_slots decode lanes over a pool of num_blocks blocks."""
        num_blocks = self.num_blocks
        if num_blocks is None:  # by default as much memory as v07's slots reserve, plus the null block
            num_blocks = num_slots * self.max_blocks(max_len) + 1
        return self.cache_class(self.config, num_slots, num_blocks, self.block_size, max_len,
                                self.device, dtype, self.poison_free_blocks)

    def make_buffers(self) -> PagedDecodeBuffers:
        return PagedDecodeBuffers(self.num_slots, self.max_blocks(self.cache.max_len), self.device)

    def captured_step(self, token_ids, positions, block_tables, context_lens, slot_mapping):
        """What a graph holds: one decode step over these lanes, to float logits."""
        hidden = self.model.forward_decode_paged(self.weights, token_ids, positions, block_tables,
                                                 context_lens, slot_mapping, self.cache.kv)
        return self.model.lm_head(self.weights, hidden).float()

    @cached_property
    def pool(self):
        """The cache's block pool, which it keeps for life: looked up once, since a step reads
        it several times per request."""
        return self.cache.pool

    @property
    def num_slots(self) -> int:
        return self.cache.num_lanes

    def can_prefill(self, sequences: Sequence[Sequence[int]]) -> bool:
        """Whether lanes and blocks are free for all of these sequences now."""
        blocks = sum(self.pool.blocks_needed(len(q)) for q in sequences)
        return len(sequences) <= self.cache.num_free() and blocks <= self.pool.num_free

    def check_prefill(self, request_ids: Sequence[Hashable], prompts: Sequence[Sequence[int]]):
        """RequestError, before anything is taken, unless these new requests fit now."""
        self.check_new(request_ids)
        if not self.can_prefill(prompts):
            raise RequestError(f"{len(request_ids)} requests to prefill do not fit the free lanes "
                               f"({self.cache.num_free()}) and blocks ({self.pool.num_free})")

    @torch.inference_mode()
    def prefill(self, request_ids: Sequence[Hashable], prompts: Sequence[Sequence[int]]):
        """Give each request a lane and the blocks for its tokens, store its K/V through its
        table; float logits [B, vocab] of each last token."""
        self.check_prefill(request_ids, prompts)
        slots = []
        for r, p in zip(request_ids, prompts):
            self.cache.assign(r, len(p))
            slots += self.cache.slots(r, 0, len(p))
        indptr, ids = self.ragged_inputs(prompts)
        mapping = self.host_longs(slots).to(self.device)
        hidden = self.model.forward_prefill_paged(self.weights, ids, indptr, mapping, self.cache.kv)
        return self.last_logits(hidden, indptr)

    def blocks_for_decode(self, request_ids: Sequence[Hashable]) -> int:
        """New blocks a decode step of these requests takes: one per request whose last block
        is full."""
        return sum(self.pool.num_tokens(r) % self.pool.block_size == 0 for r in request_ids)

    def reserve_decode(self, request_id: Hashable) -> bool:
        """Grow the request by the token this decode step feeds; False, changing nothing, when
        that needs a block and none is free."""
        if not self.pool.can_append(request_id):
            return False
        self.pool.append_token(request_id)
        return True

    def decode_inputs(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Write this step's lanes, each with its request's block table and the slot its token's
        K/V goes to, into the static buffers; returns those same buffers."""
        lanes = {}
        for r, seq in zip(request_ids, sequences, strict=True):
            position = len(seq) - 1
            lanes[self.cache.slot_of(r)] = (seq[-1], position, self.pool.table_view(r),
                                            self.pool.slot(r, position))
        self.buffers.write(lanes, self.poison, self.config.vocab_size, self.cache.max_len)
        return self.buffers.tensors

    @torch.inference_mode()
    def decode(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Each request's last token at position len - 1; float logits [B, vocab]. Reserves the
        token's room first (RequestError if the pool is out of blocks: the engine preempts
        before it gets here)."""
        return self.lane_rows(self.decode_lanes(request_ids, sequences), request_ids)

    def decode_lanes(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """decode's step, its logits left as the graph gives them: [lanes, vocab] by lane."""
        self.check_decode(request_ids, sequences)
        for r in request_ids:
            if not self.reserve_decode(r):
                raise RequestError(f"no free block for request {r!r}'s next token")
        return self.decode_step(*self.decode_inputs(request_ids, sequences))
