"""Batch metadata for paged attention, built from block tables and token counts.

Two equivalent descriptions of the same batch:

- FlashInfer's ragged form: `kv_indptr` [B+1] (prefix sums of table lengths), `kv_indices`
  (all tables, concatenated) and `kv_last_page_len` [B] (tokens in each request's last block,
  1..block_size). Request b's blocks are kv_indices[kv_indptr[b]:kv_indptr[b+1]].
- A padded form for code that wants fixed shapes (and CUDA graphs): `block_tables`
  [B, max_blocks] padded with the null block 0, and `context_lens` [B].

`slot_mapping` names, for each new token, the flat cache slot its K/V goes to (-1: store nothing).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

# The block padded entries name. The pool (kv.py) never hands it out, so a kernel may read it
# and a padded write lands where no request reads.
NULL_BLOCK = 0


@dataclass
class PagedMetadata:
    kv_indptr: torch.Tensor         # int32 [B+1]
    kv_indices: torch.Tensor        # int32 [sum of table lengths]
    kv_last_page_len: torch.Tensor  # int32 [B], each in 1..block_size
    block_tables: torch.Tensor      # int32 [B, max_blocks], padded with NULL_BLOCK
    context_lens: torch.Tensor      # int32 [B]

    def to(self, device) -> "PagedMetadata":
        return PagedMetadata(**{name: t.to(device) for name, t in vars(self).items()})


def _check(tables: Sequence[Sequence[int]], num_tokens: Sequence[int], block_size: int) -> None:
    if len(tables) != len(num_tokens):
        raise ValueError(f"{len(tables)} tables but {len(num_tokens)} token counts")
    for b, (table, n) in enumerate(zip(tables, num_tokens)):
        if n < 1 or len(table) != -(-n // block_size):
            raise ValueError(f"request {b}: {n} tokens do not fill a table of {len(table)} "
                             f"blocks of {block_size}")


def kv_indptr(tables: Sequence[Sequence[int]]) -> torch.Tensor:
    lengths = torch.tensor([len(t) for t in tables], dtype=torch.int32)
    return torch.cat([torch.zeros(1, dtype=torch.int32), lengths.cumsum(0, dtype=torch.int32)])


def kv_indices(tables: Sequence[Sequence[int]]) -> torch.Tensor:
    return torch.tensor([b for t in tables for b in t], dtype=torch.int32)


def kv_last_page_len(num_tokens: Sequence[int], block_size: int) -> torch.Tensor:
    """Tokens in each request's last block: a full last block counts block_size, not 0."""
    return torch.tensor([(n - 1) % block_size + 1 for n in num_tokens], dtype=torch.int32)


def padded_block_tables(tables: Sequence[Sequence[int]], max_blocks: int | None = None
                        ) -> torch.Tensor:
    """[B, max_blocks] int32; entries past a table's end point at the null block. A fixed
    max_blocks keeps the shape the same from step to step."""
    width = max((len(t) for t in tables), default=0) if max_blocks is None else max_blocks
    out = torch.full((len(tables), width), NULL_BLOCK, dtype=torch.int32)
    for b, table in enumerate(tables):
        if len(table) > width:
            raise ValueError(f"request {b} has {len(table)} blocks, more than {width}")
        out[b, :len(table)] = torch.tensor(table, dtype=torch.int32)
    return out


def build(tables: Sequence[Sequence[int]], num_tokens: Sequence[int], block_size: int, *,
          max_blocks: int | None = None, device="cpu") -> PagedMetadata:
    """Both forms of the metadata for requests whose tables hold num_tokens tokens each."""
    _check(tables, num_tokens, block_size)
    return PagedMetadata(
        kv_indptr=kv_indptr(tables),
        kv_indices=kv_indices(tables),
        kv_last_page_len=kv_last_page_len(num_tokens, block_size),
        block_tables=padded_block_tables(tables, max_blocks),
        context_lens=torch.tensor(list(num_tokens), dtype=torch.int32),
    ).to(device)


def slot_mapping(tables: Sequence[Sequence[int]], starts: Sequence[int], counts: Sequence[int],
                 block_size: int, *, pad_to: int | None = None, device="cpu") -> torch.Tensor:
    """int64 slots of positions start .. start+count-1 of each request, concatenated, then -1 up
    to pad_to entries. A decode step is counts of 1 at start = tokens already cached."""
    slots = []
    for table, start, count in zip(tables, starts, counts, strict=True):
        for p in range(start, start + count):
            slots.append(table[p // block_size] * block_size + p % block_size)
    if pad_to is not None:
        if len(slots) > pad_to:
            raise ValueError(f"{len(slots)} new tokens do not fit in {pad_to} entries")
        slots += [-1] * (pad_to - len(slots))
    return torch.tensor(slots, dtype=torch.int64, device=device)
