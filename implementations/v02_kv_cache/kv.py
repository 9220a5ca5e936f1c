"""The K/V cache: for each request and each layer, the keys and values of every token it has
seen so far, after RoPE, [tokens, kv_heads, head_dim]. Prefill fills it, each decode step
appends one row. Storage grows by concatenation: simple, but every append copies the request's
whole history (room allocated once, per request or in blocks, would not)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

import torch

from torchlet.contract import ModelConfig, RequestError


@dataclass
class LayerKV:
    """One request's keys and values in one layer."""

    k: torch.Tensor
    v: torch.Tensor

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the new rows; return the whole history, the new rows last."""
        self.k = torch.cat([self.k, k])
        self.v = torch.cat([self.v, v])
        return self.k, self.v

    def __len__(self) -> int:
        return self.k.shape[0]


class KVCache:
    def __init__(self, config: ModelConfig, device, dtype):
        self.config, self.device, self.dtype = config, device, dtype
        self._requests: dict[Hashable, list[LayerKV]] = {}

    @classmethod
    def assemble(cls, a) -> "KVCache":
        return cls(a.config, a.device, a.dtype)

    def check(self, prompt: list[int], params) -> None:
        """Refuse a request this memory could never hold: none here, since it grows."""

    def allocate(self, request_id: Hashable) -> list[LayerKV]:
        if request_id in self._requests:
            raise RequestError(f"request {request_id!r} already has a cache")
        empty = torch.empty(0, self.config.num_kv_heads, self.config.head_dim,
                            device=self.device, dtype=self.dtype)
        self._requests[request_id] = [LayerKV(empty, empty)
                                      for _ in range(self.config.num_layers)]
        return self._requests[request_id]

    def layers_of(self, request_id: Hashable) -> list[LayerKV]:
        if request_id not in self._requests:
            raise RequestError(f"request {request_id!r} has no cache: prefill it first")
        return self._requests[request_id]

    def __contains__(self, request_id: Hashable) -> bool:
        return request_id in self._requests

    def num_tokens(self, request_id: Hashable) -> int:
        layers = self._requests.get(request_id)
        return len(layers[0]) if layers else 0

    def total_tokens(self) -> int:
        return sum(len(layers[0]) for layers in self._requests.values())

    def free(self, request_id: Hashable) -> None:
        self._requests.pop(request_id, None)

    def kv_of(self, request_id: Hashable) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of the request's rows: per layer (k, v), each [tokens, KV, D]."""
        return [(kv.k.clone(), kv.v.clone()) for kv in self.layers_of(request_id)]
