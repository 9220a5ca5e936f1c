"""The yardstick for paged attention: plain causal softmax attention over contiguous K/V in
float64, and a slot-by-slot writer that lays contiguous K/V into a paged cache
[num_blocks, block_size, kv_heads, head_dim]. Neither uses the code under test."""
from __future__ import annotations

import torch


def new_cache(num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
              fill: float = float("nan"), dtype=torch.float64) -> torch.Tensor:
    """A cache whose every slot holds `fill`: NaN by default, so reading a slot nobody wrote
    poisons the result."""
    return torch.full((num_blocks, block_size, kv_heads, head_dim), fill, dtype=dtype)


def slot_at(table: list[int], position: int, block_size: int) -> int:
    return table[position // block_size] * block_size + position % block_size


def write_tokens(cache: torch.Tensor, table: list[int], x: torch.Tensor) -> None:
    """Put token p of x [n, kv_heads, head_dim] at cache[table[p // bs], p % bs]."""
    block_size = cache.shape[1]
    slots = torch.tensor([slot_at(table, p, block_size) for p in range(x.shape[0])])
    cache.view(-1, *cache.shape[2:])[slots] = x.to(cache.dtype)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
                     ) -> torch.Tensor:
    """q [t, H, D] are the last t of the n tokens of k, v [n, KV, D]; query i sees keys up to
    position n - t + i. Query head h reads KV head h // (H / KV). Float64 [t, H, D]."""
    t, heads, _ = q.shape
    n, kv_heads, _ = k.shape
    group = heads // kv_heads
    visible = torch.arange(n)[None, :] <= torch.arange(n - t, n)[:, None]  # [t, n]
    out = torch.empty(q.shape, dtype=torch.float64)
    for h in range(heads):
        scores = (q[:, h].double() @ k[:, h // group].double().T) * scale
        probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        out[:, h] = probs @ v[:, h // group].double()
    return out
