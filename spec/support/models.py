"""The checkpoints the specs run on."""
from __future__ import annotations

import functools
from pathlib import Path

from torchlet.checkpoints import load_hf_dir
from torchlet.contract import Checkpoint

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "fixtures"
TINY = ("tiny_qwen2", "tiny_llama")


@functools.lru_cache(maxsize=None)
def tiny_checkpoint(name: str) -> Checkpoint:
    return load_hf_dir(FIXTURES_DIR / name)
