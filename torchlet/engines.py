"""Building an engine sized to the work at hand.

From v05 on, versions preallocate per-request buffers and take sizing options (`max_model_len`,
`max_running`) that default to the model's whole context: 8192 tokens for SmolLM2, which a
decode step then pays for on every step. The harness knows how long its requests can get, so it
passes the options a version's `build` accepts and nothing else (earlier versions refuse
unknown options).
"""
from __future__ import annotations

import inspect


def build_sized(version, checkpoint, *, max_model_len: int | None = None,
                max_running: int | None = None, **options):
    accepted = inspect.signature(version.package.build).parameters
    sizing = {name: value for name, value in
              (("max_model_len", max_model_len), ("max_running", max_running))
              if value is not None and name in accepted}
    return version.build(checkpoint, **options, **sizing)
