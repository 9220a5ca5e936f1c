"""v06's runner with the decode step captured as a graph, once per bucket of lanes, and replayed
afterwards: CUDA graphs on a GPU, graphs.CpuGraph on a CPU. The graph holds the whole step, LM
head included, so a replay returns logits. Prefill stays eager and dynamic.

A step needs the lanes 0 .. (highest slot in use); the bucket is the smallest of 1, 2, 4, ... up
to the slot count that covers them. Slots are handed out lowest first, so few running requests
replay a small graph."""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from torchlet.contract import Checkpoint, RequestError, flatten

from ..v05_decode_slots import model as slot_model
from ..v05_decode_slots.cache import SlotCache
from ..v06_static_buffers.buffers import DecodeBuffers
from .graphs import GraphRunner, default_buckets


class GraphedRunner:
    def __init__(self, checkpoint: Checkpoint, device="cpu", dtype=torch.float32,
                 max_len: int | None = None,
                 num_slots: int = 8, poison_inactive_lanes: bool = False, use_graphs: bool = True):
        self.config = checkpoint.config
        self.device = torch.device(device)
        self.model = slot_model
        self.weights = slot_model.Weights.from_checkpoint(checkpoint, self.device, dtype)
        max_len = max_len or self.config.max_position
        self.cache = SlotCache(self.config, num_slots, max_len, self.device, dtype)
        # Garbage for inactive lanes, to show they cannot leak into active ones (spec only).
        self.poison = torch.Generator().manual_seed(0) if poison_inactive_lanes else None
        self.buffers = DecodeBuffers(num_slots, self.device)
        self.graphs = GraphRunner(self._decode_fn, self.buffers.tensors(),
                                  buckets=default_buckets(num_slots),
                                  constants=(self.weights, self.cache.kv), enabled=use_graphs)

    def _decode_fn(self, token_ids, positions, active):
        """What a graph holds: one decode step over these lanes, to float logits."""
        hidden = self.model.forward_decode(self.weights, token_ids, positions, active, self.cache.kv)
        return self.model.lm_head(self.weights, hidden).float()

    @property
    def num_slots(self) -> int:
        return self.cache.num_slots

    @torch.inference_mode()
    def prefill(self, request_ids: Sequence[Hashable], prompts: Sequence[Sequence[int]]):
        """Give each request a slot and fill its rows; float logits [B, vocab] of each last token."""
        taken = [r for r in request_ids if r in self.cache]
        if taken or len(set(request_ids)) != len(request_ids):
            raise RequestError(f"prefill needs distinct requests without a cache: {taken}")
        if len(request_ids) > self.cache.num_free():
            raise RequestError(f"{len(request_ids)} requests to prefill but only "
                               f"{self.cache.num_free()} free decode slots")
        slots = [self.cache.assign(r) for r in request_ids]
        indptr = self.model.req_indptr([len(p) for p in prompts], device=self.device)
        ids = torch.tensor(flatten(prompts), dtype=torch.long, device=self.device)
        hidden = self.model.forward_prefill(self.weights, ids, indptr, slots, self.cache.kv)
        for r, p in zip(request_ids, prompts):
            self.cache.set_tokens(r, len(p))
        return self.model.lm_head(self.weights, hidden[self.model.last_rows(indptr)]).float()

    def decode_inputs(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Write this step's lanes into the static buffers; returns those same buffers."""
        lanes = {self.cache.slot_of(r): (seq[-1], len(seq) - 1)
                 for r, seq in zip(request_ids, sequences, strict=True)}
        self.buffers.write(lanes, self.poison, self.config.vocab_size, self.cache.max_len)
        return self.buffers.tensors()

    @torch.inference_mode()
    def decode(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Each request's last token at position len - 1; float logits [B, vocab]."""
        for r, seq in zip(request_ids, sequences, strict=True):
            if r not in self.cache or self.cache.num_tokens(r) != len(seq) - 1:
                raise RequestError(
                    f"request {r!r} has {self.cache.num_tokens(r)} cached tokens; decode needs "
                    f"all but the last of its {len(seq)} tokens cached")
        logits = self.decode_step(*self.decode_inputs(request_ids, sequences))
        for r in request_ids:
            self.cache.set_tokens(r, self.cache.num_tokens(r) + 1)
        return logits[[self.cache.slot_of(r) for r in request_ids]]

    def decode_step(self, token_ids, positions, active) -> torch.Tensor:
        """Replay the bucket that covers the lanes in use; float logits [bucket, vocab] in the
        graph's output tensor, which the next replay overwrites (decode() indexes out a copy).
        The inputs are the static buffers, already written."""
        in_use = self.cache.slots_in_use()
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
