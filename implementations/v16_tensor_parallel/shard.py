"""Which part of the model a rank holds, Megatron-style, and the checkpoint of that part.

- q/k/v and gate/up are split by output rows: a rank holds whole heads (its KV heads and the
  query heads that read them) and its share of the intermediate. o and down are split by input
  columns, to match: each rank's product is a partial sum of the full one, and one all-reduce
  adds them. A bias of o or down is kept on rank 0 alone, so that the sum adds it once.
- The embedding and the LM head are split by vocabulary rows: a rank looks up the token ids its
  rows hold (zeros for the others, summed by an all-reduce) and computes its slice of the logits
  (gathered to the whole vocabulary).
- Norms are small and every rank holds them all.

Heads need not divide by the ranks: with more KV heads than ranks, each rank takes a run of them
(sizes differing by one, as SmolLM2's 3 over 2 ranks do). With fewer KV heads than ranks, a KV
head is replicated on every rank that shares it, and those ranks split its query heads."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from torchlet.contract import BuildError, Checkpoint, ModelConfig


def runs(n: int, parts: int) -> list[range]:
    """0..n-1 cut into `parts` consecutive runs whose lengths differ by at most one."""
    base, extra = divmod(n, parts)
    starts = [i * base + min(i, extra) for i in range(parts + 1)]
    return [range(starts[i], starts[i + 1]) for i in range(parts)]


@dataclass(frozen=True)
class Shard:
    """What rank `rank` of `world` holds: its query heads, KV heads, intermediate rows and
    vocabulary rows, as ranges of the full model's."""

    rank: int
    world: int
    heads: range
    kv_heads: range
    intermediate: range
    vocab: range
    vocab_size: int  # the whole vocabulary's

    @property
    def vocab_width(self) -> int:
        """Every rank's vocabulary slice is this wide but the last one (the gather's width)."""
        return -(-self.vocab_size // self.world)

    @classmethod
    def of(cls, config: ModelConfig, rank: int, world: int) -> "Shard":
        """Rank's shard, or BuildError naming what does not split over `world` ranks."""
        group = config.group_size
        if config.num_kv_heads >= world:
            kv = runs(config.num_kv_heads, world)[rank]
            heads = range(kv.start * group, kv.stop * group)
        else:  # replicated: ranks r with r * kv // world == j share KV head j
            j = rank * config.num_kv_heads // world
            sharing = [r for r in range(world) if r * config.num_kv_heads // world == j]
            if group < len(sharing):
                raise BuildError(
                    f"tensor parallel over {world} ranks: KV head {j} is shared by "
                    f"{len(sharing)} ranks but has only {group} query heads to split")
            kv = range(j, j + 1)
            mine = runs(group, len(sharing))[sharing.index(rank)]
            heads = range(j * group + mine.start, j * group + mine.stop)
        if config.intermediate_size < world or config.vocab_size < world:
            raise BuildError(f"tensor parallel over {world} ranks: the model is too small to split "
                             f"(intermediate {config.intermediate_size}, vocabulary "
                             f"{config.vocab_size})")
        per = -(-config.vocab_size // world)  # equal slices, the last one shorter: one gather
        vocab = range(min(rank * per, config.vocab_size), min((rank + 1) * per, config.vocab_size))
        if not vocab:
            raise BuildError(f"tensor parallel over {world} ranks: rank {rank} would hold no "
                             f"vocabulary rows of {config.vocab_size}")
        return cls(rank, world, heads, kv, runs(config.intermediate_size, world)[rank], vocab, config.vocab_size)

    def local_config(self, config: ModelConfig) -> ModelConfig:
        """The config of this rank's part: its heads and intermediate; the vocabulary stays the
        full one (token ids and logits are the full model's)."""
        return dataclasses.replace(config, num_heads=len(self.heads),
                                   num_kv_heads=len(self.kv_heads),
                                   intermediate_size=len(self.intermediate))


@dataclass
class ShardCheckpoint(Checkpoint):
    """A rank's part of a checkpoint: its tensors (copies, so the full ones can go), its config,
    and the shard they are of."""

    shard: Shard | None = None
    full_config: ModelConfig | None = None


def rows(t, r: range, scale: int = 1):
    return t[r.start * scale:r.stop * scale].clone()


def columns(t, r: range, scale: int = 1):
    return t[:, r.start * scale:r.stop * scale].clone()


def shard_checkpoint(ckpt: Checkpoint, shard: Shard) -> ShardCheckpoint:
    """The tensors rank `shard.rank` holds, named as the full checkpoint's."""
    d = ckpt.config.head_dim
    by_rows = {"self_attn.q_proj": (shard.heads, d), "self_attn.k_proj": (shard.kv_heads, d),
               "self_attn.v_proj": (shard.kv_heads, d), "mlp.gate_proj": (shard.intermediate, 1),
               "mlp.up_proj": (shard.intermediate, 1)}
    by_columns = {"self_attn.o_proj": (shard.heads, d), "mlp.down_proj": (shard.intermediate, 1)}
    tensors = {}
    for name, t in ckpt.tensors.items():
        layer, _, kind = name.rpartition(".")
        module = layer.split(".", 3)[-1] if layer.startswith("model.layers.") else layer
        if module in by_rows:
            tensors[name] = rows(t, *by_rows[module])
        elif module in by_columns and kind == "weight":
            tensors[name] = columns(t, *by_columns[module])
        elif module in by_columns:  # a bias after a split sum: added once, on rank 0
            if shard.rank == 0:
                tensors[name] = t
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            tensors[name] = rows(t, shard.vocab)
        else:
            tensors[name] = t
    return ShardCheckpoint(shard.local_config(ckpt.config), tensors, shard, ckpt.config)
