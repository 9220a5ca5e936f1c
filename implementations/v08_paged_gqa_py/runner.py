"""v07's graphed runner over paged K/V memory. Prefill takes a request's blocks (and a decode
lane) and writes its K/V through its table; each decode step first grows every request by one
token (reserve_decode: a new block only when its last one is full), then replays the graph of the
step, which stores and reads K/V through the lanes' block tables."""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from torchlet.contract import Checkpoint, RequestError, flatten

from ..v07_cuda_graph.graphs import GraphRunner, default_buckets
from . import model as paged_model
from .buffers import PagedDecodeBuffers
from .cache import PagedCache


class PagedRunner:
    def __init__(self, checkpoint: Checkpoint, device="cpu", dtype=torch.float32,
                 max_len: int | None = None,
                 num_slots: int = 8, poison_inactive_lanes: bool = False, use_graphs: bool = True,
                 num_blocks: int | None = None, block_size: int = 16, model=paged_model,
                 poison_free_blocks: bool = False):
        self.config = checkpoint.config
        self.device = torch.device(device)
        # The module of model functions every pass calls: a later version passes its own.
        self.model = model
        self.weights = model.Weights.from_checkpoint(checkpoint, self.device, dtype)
        max_len = max_len or self.config.max_position
        max_blocks = -(-max_len // block_size)
        if num_blocks is None:  # by default as much memory as v07's slots reserve, plus the null block
            num_blocks = num_slots * max_blocks + 1
        self.cache = PagedCache(self.config, num_slots, num_blocks, block_size, max_len,
                                self.device, dtype, poison_free_blocks)
        # Garbage for inactive lanes, to show they cannot leak into active ones (spec only).
        self.poison = torch.Generator().manual_seed(0) if poison_inactive_lanes else None
        self.buffers = PagedDecodeBuffers(num_slots, max_blocks, self.device)
        self.graphs = GraphRunner(self._decode_fn, self.buffers.tensors(),
                                  buckets=default_buckets(num_slots),
                                  constants=(self.weights, self.cache.kv), enabled=use_graphs)

    def _decode_fn(self, token_ids, positions, block_tables, context_lens, slot_mapping):
        """What a graph holds: one decode step over these lanes, to float logits."""
        hidden = self.model.forward_decode_paged(self.weights, token_ids, positions, block_tables,
                                                 context_lens, slot_mapping, self.cache.kv)
        return self.model.lm_head(self.weights, hidden).float()

    @property
    def pool(self):
        return self.cache.pool

    @property
    def num_slots(self) -> int:
        return self.cache.num_lanes

    def can_prefill(self, sequences: Sequence[Sequence[int]]) -> bool:
        """Whether lanes and blocks are free for all of these sequences now."""
        blocks = sum(self.pool.blocks_needed(len(q)) for q in sequences)
        return len(sequences) <= self.cache.num_free() and blocks <= self.pool.num_free

    @torch.inference_mode()
    def prefill(self, request_ids: Sequence[Hashable], prompts: Sequence[Sequence[int]]):
        """Give each request a lane and the blocks for its tokens, store its K/V through its
        table; float logits [B, vocab] of each last token."""
        taken = [r for r in request_ids if r in self.cache]
        if taken or len(set(request_ids)) != len(request_ids):
            raise RequestError(f"prefill needs distinct requests without a cache: {taken}")
        if not self.can_prefill(prompts):
            raise RequestError(f"{len(request_ids)} requests to prefill do not fit the free lanes "
                               f"({self.cache.num_free()}) and blocks ({self.pool.num_free})")
        slots = []
        for r, p in zip(request_ids, prompts):
            self.cache.assign(r, len(p))
            slots += self.cache.slots(r, 0, len(p))
        indptr = self.model.req_indptr([len(p) for p in prompts], device=self.device)
        ids = torch.tensor(flatten(prompts), dtype=torch.long, device=self.device)
        mapping = torch.tensor(slots, dtype=torch.long, device=self.device)
        hidden = self.model.forward_prefill_paged(self.weights, ids, indptr, mapping, self.cache.kv)
        return self.model.lm_head(self.weights, hidden[self.model.last_rows(indptr)]).float()

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
        """Write this step's lanes into the static buffers; returns those same buffers."""
        lanes = {}
        for r, seq in zip(request_ids, sequences, strict=True):
            position = len(seq) - 1
            lanes[self.cache.slot_of(r)] = (seq[-1], position, self.pool.table(r),
                                            self.pool.slot(r, position))
        self.buffers.write(lanes, self.poison, self.config.vocab_size, self.cache.max_len)
        return self.buffers.tensors()

    @torch.inference_mode()
    def decode(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Each request's last token at position len - 1; float logits [B, vocab]. Reserves the
        token's room first (RequestError if the pool is out of blocks: the engine preempts
        before it gets here)."""
        for r, seq in zip(request_ids, sequences, strict=True):
            if r not in self.cache or self.cache.num_tokens(r) != len(seq) - 1:
                raise RequestError(
                    f"request {r!r} has {self.cache.num_tokens(r)} cached tokens; decode needs "
                    f"all but the last of its {len(seq)} tokens cached")
        for r in request_ids:
            if not self.reserve_decode(r):
                raise RequestError(f"no free block for request {r!r}'s next token")
        logits = self.decode_step(*self.decode_inputs(request_ids, sequences))
        return logits[[self.cache.slot_of(r) for r in request_ids]]

    def decode_step(self, *buffers) -> torch.Tensor:
        """Replay the bucket that covers the lanes in use; float logits [bucket, vocab] in the
        graph's output tensor, which the next replay overwrites (decode() indexes out a copy).
        The inputs are the static buffers, already written."""
        in_use = [s for _, s, _ in self.cache.items()]
        return self.graphs.run(max(in_use) + 1 if in_use else 1)

    @torch.inference_mode()
    def forward_ragged(self, token_ids: list[int], req_indptr: torch.Tensor) -> torch.Tensor:
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        hidden = self.model.forward_ragged(self.weights, ids, req_indptr.to(self.device))
        return self.model.lm_head(self.weights, hidden).float()

    def cached_kv(self, request_id: Hashable) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if request_id not in self.cache:
            raise RequestError(f"request {request_id!r} has no cache")
        return self.cache.kv_of(request_id)
