"""Prompts for token parity, screened on the oracle so parity is deterministic.

In float32 the top-1/top-2 logit gap of a tiny random model can be as small as float32 error, and
then two correct implementations may pick different tokens. We draw candidate prompts from a
seeded generator and keep those whose float64 reference keeps a gap of at least MARGIN at every
one of the HORIZON greedy steps.
"""
from __future__ import annotations

import functools

import torch

from spec.support.models.fixtures import tiny_checkpoint
from spec.support.oracles.oracle import Reference, cached_model, greedy
from spec.support.oracles.oracle_cache import on_disk

MARGIN = 1e-3   # logits; float32 error on these models is about 1e-5, a hundred times less
HORIZON = 24    # new tokens compared per prompt
COUNT = 4       # prompts per fixture


@functools.lru_cache(maxsize=None)
@on_disk
def screened(fixture: str, count: int = COUNT, horizon: int = HORIZON,
             margin: float = MARGIN) -> tuple[tuple[tuple[int, ...], Reference], ...]:
    """(prompt, reference) pairs whose reference gap stays above `margin` for `horizon` steps."""
    vocab = tiny_checkpoint(fixture).config.vocab_size
    g = torch.Generator().manual_seed(7)
    model = cached_model(fixture)
    found = []
    for _ in range(100):
        length = int(torch.randint(1, 30, (1,), generator=g))
        prompt = tuple(torch.randint(3, vocab, (length,), generator=g).tolist())
        ref = greedy(model, list(prompt), horizon, stop_below=margin)
        if len(ref.tokens) == horizon and ref.horizon(margin) == horizon:
            found.append((prompt, ref))
            if len(found) == count:
                return tuple(found)
    raise AssertionError(f"only {len(found)} of 100 candidate prompts keep a gap of {margin}")
