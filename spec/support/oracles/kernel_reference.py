"""Plain PyTorch references for the Triton kernels, written here rather than taken from any
version, so that the code under test never judges itself. They follow Hugging Face's maths and
compute in float64 from the inputs as given (the kernels' inputs are already rounded to their
dtype), except where HF fixes float32 on purpose (RoPE's angles).

Also the scenario builder for paged attention: a KV cache whose pages lie in random physical
order, with NaN in every slot that holds no context token."""
from __future__ import annotations

from dataclasses import dataclass

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.double()
    return weight.double() * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """rotate_half layout: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) per head. The angles
    are float32, as in HF: at position 30000 a float32 angle is off by ~1e-3 rad from the exact
    one, so a float64 angle would be a different (if better) function."""
    head_dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32,
                                            device=x.device) / head_dim)
    angles = (positions.float()[:, None] * inv_freq[None, :]).double()[:, None, :]
    x1, x2 = x.double().chunk(2, dim=-1)
    return torch.cat([x1 * angles.cos() - x2 * angles.sin(),
                      x2 * angles.cos() + x1 * angles.sin()], dim=-1)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate.double()) * up.double()


def attention_over(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """One query per head, q [H, D], over k, v [n, KV, D]: a plain softmax. Query head h reads
    KV head h // (H / KV)."""
    group = q.shape[0] // k.shape[1]
    k = k.double().repeat_interleave(group, dim=1)
    v = v.double().repeat_interleave(group, dim=1)
    probs = torch.softmax(torch.einsum("hd,nhd->hn", q.double(), k) * scale, dim=-1)
    return torch.einsum("hn,nhd->hd", probs, v)


def table_slots(table: torch.Tensor, n: int, block_size: int) -> torch.Tensor:
    """The flat cache rows (block * block_size + offset) of the first n tokens a table names."""
    p = torch.arange(n, device=table.device)
    return table.long()[p // block_size] * block_size + p % block_size


def gather(cache: torch.Tensor, table: torch.Tensor, n: int) -> torch.Tensor:
    """The first n tokens a block table names, token by token: [n, KV, D]."""
    return cache.flatten(0, 1)[table_slots(table, n, cache.shape[1])]


def paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens, scale):
    """[B, H, D] float64; a request with context 0 gives zeros."""
    out = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    for b, n in enumerate(context_lens.tolist()):
        if n:
            out[b] = attention_over(q[b], gather(k_cache, block_tables[b], n),
                                    gather(v_cache, block_tables[b], n), scale)
    return out


def context_attention(q, k_cache, v_cache, rows: list[int], contexts: list[torch.Tensor], scale):
    """Ragged rows q [T, H, D], request r's rows[r] rows the last of its context, whose slots
    (flat cache rows, in position order) are contexts[r]: row j sees the keys up to its own
    position len(contexts[r]) - rows[r] + j. [T, H, D] float64."""
    keys, values = k_cache.flatten(0, 1), v_cache.flatten(0, 1)
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    first = 0
    for n, slots in zip(rows, contexts):
        for j in range(n):
            seen = slots[:len(slots) - n + j + 1]
            out[first + j] = attention_over(q[first + j], keys[seen], values[seen], scale)
        first += n
    return out


@dataclass
class PagedBatch:
    q: torch.Tensor             # [B, H, D]
    k_cache: torch.Tensor       # [num_blocks, block_size, KV, D]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [B, max_blocks] int32, padded with the null block 0
    context_lens: torch.Tensor  # [B] int32
    scale: float


def paged_batch(target, gen: torch.Generator, context_lens: list[int], *, block_size: int,
                kv_heads: int, group: int, head_dim: int, spare_blocks: int = 2,
                pad_blocks: int = 1) -> PagedBatch:
    """Every request's pages get distinct physical blocks in a random order (never block 0);
    tables carry `pad_blocks` extra null entries. Slots outside every context, the rest of a
    partial last page, spare blocks and the null block all hold NaN, so any read past a context
    shows in the output."""
    pages = [-(-n // block_size) for n in context_lens]
    num_blocks = 1 + sum(pages) + spare_blocks
    order = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    shape = (num_blocks, block_size, kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=target.dtype, device=target.device)
    v_cache = torch.full(shape, float("nan"), dtype=target.dtype, device=target.device)
    tables = torch.zeros(len(context_lens), max(pages, default=0) + pad_blocks, dtype=torch.int32)
    for b, n in enumerate(context_lens):
        for j in range(pages[b]):
            block = order.pop()
            tables[b, j] = block
            used = min(block_size, n - j * block_size)
            k_cache[block, :used] = target.randn(gen, used, kv_heads, head_dim)
            v_cache[block, :used] = target.randn(gen, used, kv_heads, head_dim)
    q = target.randn(gen, len(context_lens), kv_heads * group, head_dim)
    return PagedBatch(q, k_cache, v_cache, tables.to(target.device),
                      torch.tensor(context_lens, dtype=torch.int32, device=target.device),
                      head_dim ** -0.5)
