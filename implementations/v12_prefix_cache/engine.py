"""v11's engine over the prefix-cache runner; it adds prefix_cache_stats() to the contract."""
from __future__ import annotations

from functools import partial
from typing import Callable

from torchlet.contract import BuildOption, Checkpoint

from ..v11_sampling import OPTIONS as PREVIOUS_OPTIONS
from ..v11_sampling import SamplingEngine, paged_build
from .model import layers
from .runner import PrefixRunner


class PrefixEngine(SamplingEngine):
    def prefix_cache_stats(self) -> dict[str, int]:
        """Prompt tokens looked up, tokens found cached (not computed), cached blocks evicted."""
        pool = self.runner.pool
        if not self.runner.prefix_cache:
            return {"queried_tokens": 0, "hit_tokens": 0, "evictions": 0}
        return {"queried_tokens": pool.queried_tokens, "hit_tokens": pool.hit_tokens,
                "evictions": pool.evictions}


PREFIX_OPTIONS = (
    BuildOption("prefix_cache", bool, True, "share cached prompt prefixes (False: v11's engine)"),
    BuildOption("block_hash", Callable, None, "block_hash(parent hash, token ids) -> int in place "
                "of the pool's hash (None: Python's hash of the pair)"),
)
OPTIONS = PREVIOUS_OPTIONS + PREFIX_OPTIONS


def prefix_build(version: str, runner_class, engine_class, model, checkpoint: Checkpoint, *,
                 prefix_cache: bool = True, block_hash: Callable | None = None, **options):
    """v11's build and options, an engine_class over a runner_class (PrefixEngine and
    PrefixRunner, or subclasses) calling `model` (a decoder): prefix_cache=False turns the cache
    off, block_hash replaces the hash of a block (its parent's hash and its token ids). version
    names the build in its refusals."""
    runner = partial(runner_class, prefix_cache=prefix_cache, block_hash=block_hash)
    return paged_build(version, runner, engine_class, checkpoint, model=model, **options)


# This version's build: the prefix cache over this version's decoder.
build = partial(prefix_build, "v12", PrefixRunner, PrefixEngine, layers)
