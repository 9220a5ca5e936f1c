"""Hypothesis strategies for paged KV: pool shapes, batches of block tables in random physical
order, and attention head layouts."""
from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

BLOCK_SIZES = (1, 2, 3, 4, 16)  # 3: a size that is not a power of two
GQA_RATIOS = (1, 2, 7)          # query heads per KV head


@dataclass(frozen=True)
class PagedBatch:
    """B requests with num_tokens[b] tokens each in tables[b], over physical blocks 1 ..
    num_blocks-1 handed out in a random order (block 0 is the null block)."""

    block_size: int
    num_blocks: int
    tables: list[list[int]]
    num_tokens: list[int]


@dataclass(frozen=True)
class Heads:
    num_heads: int
    num_kv_heads: int
    head_dim: int


def pool_shapes():
    """(num_blocks, block_size) of a small pool: tight enough that exhaustion is common."""
    return st.tuples(st.integers(2, 24), st.sampled_from(BLOCK_SIZES))


@st.composite
def paged_batches(draw, max_batch: int = 4, max_tokens: int = 70, spare_blocks: int = 3):
    block_size = draw(st.sampled_from(BLOCK_SIZES))
    num_tokens = draw(st.lists(st.integers(1, max_tokens), min_size=1, max_size=max_batch))
    needed = [-(-n // block_size) for n in num_tokens]
    num_blocks = 1 + sum(needed) + draw(st.integers(0, spare_blocks))
    order = draw(st.permutations(range(1, num_blocks)))
    tables, start = [], 0
    for count in needed:
        tables.append(list(order[start:start + count]))
        start += count
    return PagedBatch(block_size, num_blocks, tables, num_tokens)


@st.composite
def head_layouts(draw, ratios=GQA_RATIOS):
    kv_heads = draw(st.integers(1, 2))
    return Heads(kv_heads * draw(st.sampled_from(ratios)), kv_heads,
                 draw(st.sampled_from((2, 4, 8))))
