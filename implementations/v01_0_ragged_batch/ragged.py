"""A ragged batch: the requests' tokens laid end to end in one buffer, no padding, described by
`req_indptr`, the int32 prefix sums of their lengths (FlashInfer calls the same thing
`qo_indptr`). Request i owns rows req_indptr[i] : req_indptr[i + 1]."""
from __future__ import annotations

from typing import Sequence

import torch

from torchlet.contract import RequestError


def req_indptr(lengths: Sequence[int], device="cpu") -> torch.Tensor:
    """[0, l0, l0 + l1, ...]: int32, length B + 1."""
    out = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=device)
    if len(lengths):
        out[1:] = torch.tensor(list(lengths), dtype=torch.int64).cumsum(0).to(torch.int32)
    return out


def check_req_indptr(indptr: torch.Tensor, num_tokens: int) -> None:
    """Refuse an indptr that does not describe `num_tokens` rows split into whole requests."""
    if indptr.dtype != torch.int32 or indptr.dim() != 1 or len(indptr) < 2:
        raise RequestError(
            f"req_indptr must be a 1-D int32 tensor of length B + 1 >= 2, got "
            f"{indptr.dtype} of shape {tuple(indptr.shape)}")
    values = indptr.tolist()
    if values[0] != 0:
        raise RequestError(f"req_indptr must start at 0, got {values[0]}")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise RequestError(f"req_indptr must increase (every request has a token): {values}")
    if values[-1] != num_tokens:
        raise RequestError(f"req_indptr ends at {values[-1]} but the batch has {num_tokens} tokens")


def spans(indptr: torch.Tensor) -> list[tuple[int, int]]:
    """(start, end) row range of each request."""
    values = indptr.tolist()
    return list(zip(values, values[1:]))


def row_positions(indptr: torch.Tensor, offsets: Sequence[int] | None = None) -> torch.Tensor:
    """Each row's position inside its own request, plus that request's offset (tokens it already
    has elsewhere, e.g. in a cache): int64 [num_tokens]."""
    lengths = (indptr[1:] - indptr[:-1]).long()
    starts = indptr[:-1].long().repeat_interleave(lengths)
    pos = torch.arange(int(indptr[-1]), device=indptr.device) - starts
    if offsets is not None:
        pos = pos + torch.tensor(list(offsets), device=indptr.device).repeat_interleave(lengths)
    return pos


def last_rows(indptr: torch.Tensor) -> torch.Tensor:
    """Index of each request's last row: where its next token is predicted."""
    return indptr[1:].long() - 1
