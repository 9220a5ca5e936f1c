"""One side of a `bench main-job` (or `bench long-prompt`) comparison: a name, how it runs, and
the call that answers the prompt once. main_job.py makes the HF and version contenders,
llama_anchor.py the llama.cpp one; each meets the others only here."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Contender:
    """One side of the comparison: `run()` answers the prompt once (`run(ids)`, other ids) and
    returns (token ids, seconds to the first token, seconds to the last)."""

    name: str
    mode: str
    run: Callable[[], tuple[list[int], float, float]]
    scope: Callable = contextlib.nullcontext  # what every call of this contender runs inside
    stats: Callable | None = None             # prefix cache counters, for a version with one
    extra: dict = field(default_factory=dict)
