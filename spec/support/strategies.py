"""Hypothesis strategies shared by the specs: prompts, batches of prompts, generation params and
arrival schedules. Token ids avoid the low ids so an eos id can be chosen that no prompt holds."""
from __future__ import annotations

from hypothesis import strategies as st

from torchlet.contract import GenerationParams

FIRST_ID = 3  # ids 0..2 are left for eos/stop, as in the fixtures (eos = 2)


def prompts(vocab: int, max_len: int = 12) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(FIRST_ID, vocab - 1), min_size=1, max_size=max_len)


def prompt_batches(vocab: int, max_requests: int = 4, max_len: int = 12):
    """1 to max_requests prompts of lengths 1 to max_len, lengths drawn independently."""
    return st.lists(prompts(vocab, max_len), min_size=1, max_size=max_requests)


def params(max_new: int = 6, vocab: int | None = None) -> st.SearchStrategy[GenerationParams]:
    """Lengths from 1 to max_new; sometimes a frequent token is made a stop id so that requests
    finish at different steps."""
    stop = st.just(()) if vocab is None else st.one_of(
        st.just(()), st.tuples(st.integers(FIRST_ID, vocab - 1)))
    return st.builds(GenerationParams, max_new_tokens=st.integers(1, max_new),
                     stop_token_ids=stop)


def arrival_schedules(vocab: int, max_requests: int = 6, max_len: int = 10, max_new: int = 5,
                      max_gap: int = 3):
    """[(steps to run before adding, prompt, params)]: requests arrive while others decode."""
    return st.lists(
        st.tuples(st.integers(0, max_gap), prompts(vocab, max_len), params(max_new)),
        min_size=1, max_size=max_requests)
