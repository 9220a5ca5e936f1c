"""Building an engine sized to the work at hand.

From v05 on, versions preallocate per-request buffers and take sizing options (the rows a lane
holds, the running requests) that default to the model's whole context: 8192 tokens for SmolLM2,
which a decode step then pays for on every step. The harness knows how long its requests can
get, so it passes them to the options a version declares for those roles (MAX_LEN, MAX_RUNNING)
and nothing else (earlier versions declare none, and refuse unknown options).
"""
from __future__ import annotations

from torchlet.contract import MAX_LEN, MAX_RUNNING


def build_sized(version, checkpoint, *, max_model_len: int | None = None,
                max_running: int | None = None, **options):
    sizing = version.options_by_role({MAX_LEN: max_model_len, MAX_RUNNING: max_running})
    return version.build(checkpoint, **options, **sizing)
