"""A random model that each rank makes only its shard of, what a shard will hold, and each
rank's peak memory.

A Qwen2.5-72B-shaped model is about 145 GB in bf16: more than one H200 holds, so it cannot be
drawn whole on one device (or on the host) and then split. `ShardedRandomModel` hands each rank
a checkpoint whose matrices are `RandomSlab`s: a slab has the full tensor's shape and name but
holds nothing; the version's own shard_checkpoint slices it (rows or columns of its shard), and
only the slice is drawn, on the rank's device. The values depend on the slice, so a model drawn
at TP=2 is not the one drawn at TP=1: for costs that does not matter.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import torch

from torchlet.checkpoints import expected_shapes
from torchlet.contract import Checkpoint, ModelConfig

from .workloads import draw, random_checkpoint

# Weights v13's packing copies once more while the runner builds (q, k, v into one matrix, gate
# and up into another) before the checkpoint's own tensors are let go.
PACKED = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")


@dataclass(frozen=True)
class RandomSlab:
    """A matrix of `shape` that exists only as the slices taken of it (t[rows] or
    t[:, columns]), each drawn when taken, from a generator seeded by the model's seed, the
    tensor's name and where the slice starts."""

    name: str
    shape: tuple[int, int]
    seed: int
    device: Any
    dtype: torch.dtype

    def __getitem__(self, key) -> torch.Tensor:
        rows, columns = key if isinstance(key, tuple) else (key, slice(None))
        rows, columns = (range(*s.indices(n)) for s, n in zip((rows, columns), self.shape))
        where = f"{self.seed}:{self.name}:{rows.start}:{columns.start}"
        return made(self.name, (len(rows), len(columns)), self.shape[-1], where, self.device,
                    self.dtype)


def made(name: str, shape, fan_in: int, seed, device, dtype) -> torch.Tensor:
    """draw's tensor from a generator seeded by `seed` (hashed), or on the meta device an
    empty one (no generator there): its shape and bytes alone."""
    if torch.device(device).type == "meta":
        return torch.empty(shape, device="meta", dtype=dtype)
    g = torch.Generator(device=device).manual_seed(zlib.crc32(str(seed).encode()))
    return draw(name, shape, fan_in, g, device, dtype)


def slab_checkpoint(config: ModelConfig, seed: int, device, dtype) -> Checkpoint:
    """The model with every matrix a RandomSlab; the vectors (norms, biases: a few KiB a layer)
    are drawn whole."""
    return Checkpoint(config, {
        name: RandomSlab(name, shape, seed, device, dtype) if len(shape) == 2
        else made(name, shape, shape[-1], f"{seed}:{name}", device, dtype)
        for name, shape in expected_shapes(config).items()})


@dataclass(frozen=True)
class ShardedRandomModel:
    """A random model of `config`, made on each rank: the whole model where there is one rank,
    else slabs that the version's sharding cuts to the rank's part (BuildSpec.model)."""

    config: ModelConfig
    seed: int = 0

    def checkpoint(self, device, dtype) -> Checkpoint:
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_world_size() > 1:
            return slab_checkpoint(self.config, self.seed, device, dtype)
        return random_checkpoint(self.config, self.seed, device, dtype)


def planned_bytes(version, config: ModelConfig, world: int, dtype: torch.dtype,
                  kv_tokens: int) -> list[dict]:
    """What each rank will hold, in bytes, found by the version's own sharding on slabs of the
    meta device (nothing allocated): its weights, the extra copies v13's packing makes while
    building, and its K/V for kv_tokens tokens."""
    package = version.package
    whole = slab_checkpoint(config, 0, "meta", dtype)
    plans = []
    for rank in range(world):
        shard = package.Shard.of(config, rank, world)
        tensors = (package.shard_checkpoint(whole, shard).tensors if world > 1 else
                   {n: whole.tensors[n][:] for n in whole.tensors})
        size = {n: t.numel() * dtype.itemsize for n, t in tensors.items()}
        weights = sum(size.values())  # a tied LM head is no tensor of its own
        local = shard.local_config(config)
        plans.append({"weights": weights,
                      "packing": sum(b for n, b in size.items() if n.split(".")[-2] in PACKED),
                      "kv": kv_tokens * local.kv_bytes_per_token(dtype)})
    return plans


def peak_bytes() -> int:
    """This process's peak memory: on a GPU, torch's peak allocation on its device since the
    last reset (then reset); on a CPU, the peak RSS of the process's life (ru_maxrss)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return peak
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def gather_peaks() -> list[int]:
    """Every rank's peak_bytes, in rank order, on every rank: rank 0 calls it after closing an
    engine, and each rank it started calls it then too (Ranks' `after`)."""
    import torch.distributed as dist

    mine = peak_bytes()
    if not dist.is_initialized():
        return [mine]
    found = [None] * dist.get_world_size()
    dist.all_gather_object(found, mine)
    return found
