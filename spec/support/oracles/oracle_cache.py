"""The oracle's screened references, kept on disk for the other processes of a run.

Screening runs the float64 oracle over up to a hundred candidate prompts a fixture: seconds a
fixture on these 2-core machines, and every process of the README's run paid it again (both
xdist workers, the mutants' and the stub runs' workers, the learner's child runs). A result is
stored under build/oracle-cache/, named by a hash of everything it depends on: the function and
its arguments, the source of its module and of the oracle's (the HF model, the loader, the
contract's config, the fixture maker), every file under fixtures/, and torch's and
transformers' versions. So what a spec reads is the oracle's output, never the code under
test's (no spec imports an implementation to compute one), and a change to any of those inputs
computes it afresh.
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import os
import pickle
from pathlib import Path

import torch
import transformers

REPO = Path(__file__).resolve().parents[3]
CACHE = REPO / "build" / "oracle-cache"
# What the oracle's answers depend on besides the function's own module.
SOURCES = ("spec/support/oracles/oracle.py", "spec/support/models/fixtures.py", "torchlet/checkpoints.py",
           "torchlet/contract/values.py")


@functools.lru_cache(maxsize=None)
def _inputs_digest() -> str:
    h = hashlib.sha256(f"{torch.__version__} {transformers.__version__}".encode())
    for path in [*(REPO / s for s in SOURCES), *sorted((REPO / "fixtures").rglob("*"))]:
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(REPO)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def on_disk(fn):
    """Keep fn's result (a pure function of its arguments and the inputs above) on disk."""
    module_source = Path(inspect.getsourcefile(fn)).read_bytes()

    @functools.wraps(fn)
    def kept(*args, **kwargs):
        key = hashlib.sha256(module_source + _inputs_digest().encode()
                             + repr((fn.__qualname__, args, sorted(kwargs.items()))).encode())
        path = CACHE / f"{fn.__name__}-{key.hexdigest()[:32]}.pickle"
        try:
            return pickle.loads(path.read_bytes())
        except (OSError, EOFError, pickle.UnpicklingError):
            pass
        value = fn(*args, **kwargs)
        part = path.with_name(f"{path.name}.{os.getpid()}")  # another process may write it too
        try:
            CACHE.mkdir(parents=True, exist_ok=True)
            part.write_bytes(pickle.dumps(value))
            os.replace(part, path)
        except OSError:  # a read-only checkout computes it again next time
            pass
        return value

    return kept
