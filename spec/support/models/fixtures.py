"""The checkpoints the specs run on."""
from __future__ import annotations

import functools
from pathlib import Path

from torchlet.checkpoints import load_hf_dir
from torchlet.contract import Checkpoint

FIXTURES_DIR = Path(__file__).resolve().parents[3] / "fixtures"
TINY = ("tiny_qwen2", "tiny_llama")
# head_dim declared apart from hidden_size / num_heads (as Qwen3's is): its own parity specs,
# not every spec that runs over TINY.
HEAD_DIM = "tiny_head_dim"
# Qwen3 (per-head q/k norms, a declared head_dim, no bias) and a group of 5 query heads on one KV
# head (not a power of two): their own parity specs too, on SHAPE_PROMPTS screened prompts.
QWEN3, GQA5 = "tiny_qwen3", "tiny_gqa5"
SHAPE_PROMPTS = 2
# Each TINY fixture's very config with other weights (drawn as make_fixtures draws them, from
# another seed), made in memory: two checkpoints of one shape.
TWINS = {f"{name}_twin": name for name in TINY}
TWIN_SEED = 4321


@functools.lru_cache(maxsize=None)
def tiny_checkpoint(name: str) -> Checkpoint:
    if name in TWINS:
        from fixtures.make_fixtures import SCALES, random_tensors

        base = tiny_checkpoint(TWINS[name])
        return Checkpoint(base.config, random_tensors(base.config, TWIN_SEED,
                                                      **SCALES[TWINS[name]]))
    return load_hf_dir(FIXTURES_DIR / name)
