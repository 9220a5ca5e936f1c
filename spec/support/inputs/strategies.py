"""Hypothesis strategies shared by the specs: prompts, batches of prompts, generation params and
arrival schedules. Token ids avoid the low ids so an eos id can be chosen that no prompt holds."""
from __future__ import annotations

from hypothesis import strategies as st

from torchlet.contract import MAX_TEMPERATURE, MIN_TEMPERATURE, GenerationParams

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


# Values no step could run, per GenerationParams setting: the wrong type (bool is no int, a bare
# int is no list of ids, a str is no list of anything) or out of range. Valid values never come.
_NOT_AN_INT = st.one_of(st.booleans(), st.floats(allow_nan=True), st.text(max_size=3),
                        st.none(), st.lists(st.integers(0, 9), max_size=2))
_NOT_A_BOOL = st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=3), st.none())
_BAD_IDS = st.one_of(
    st.integers(), st.text(max_size=3), st.none(), st.floats(allow_nan=True),
    st.tuples(st.lists(st.integers(0, 99), max_size=2), _NOT_AN_INT,
              st.sampled_from([list, tuple])).map(lambda t: t[2](t[0] + [t[1]])))
_NOT_A_NUMBER = st.one_of(st.booleans(), st.text(max_size=3), st.none(),
                          st.just(float("nan")), st.just(float("inf")), st.just(float("-inf")))
_BAD_SETTINGS = {
    "max_new_tokens": st.one_of(st.integers(max_value=0), _NOT_AN_INT),
    "eos_token_ids": _BAD_IDS,
    "stop_token_ids": _BAD_IDS,
    "ignore_eos": _NOT_A_BOOL,
    "temperature": st.one_of(st.floats(max_value=-1e-6), _NOT_A_NUMBER,
                             st.floats(0, MIN_TEMPERATURE, exclude_min=True, exclude_max=True),
                             st.floats(MAX_TEMPERATURE, exclude_min=True)),
    # past every fixture's vocabulary (and 2^63, past an int64 buffer)
    "top_k": st.one_of(st.integers(max_value=-1), st.booleans(), st.floats(allow_nan=True),
                       st.text(max_size=3), st.none(), st.integers(min_value=2 ** 20)),
    "top_p": st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0, exclude_min=True),
                       _NOT_A_NUMBER),
    "min_p": st.one_of(st.floats(max_value=-1e-9),  # not max_value=0 excluded: -0.0 is valid
                       st.floats(min_value=1.0, exclude_min=True), _NOT_A_NUMBER),
    "seed": st.one_of(st.floats(allow_nan=True), st.booleans(), st.text(max_size=3)),
}


def malformed_setting() -> st.SearchStrategy[tuple[str, object]]:
    """(setting name, a value of it that check_params must refuse), every setting of
    GenerationParams in turn."""
    return st.sampled_from(sorted(_BAD_SETTINGS)).flatmap(
        lambda name: st.tuples(st.just(name), _BAD_SETTINGS[name]))
