"""v15's decoder on one rank's shard (shard.py), and the collectives that make the ranks' parts
one model: after o and after down, one all-reduce each adds the ranks' partial sums; the
embedding's masked lookup is summed by one all-reduce; the LM head's logit slices are gathered.
Everything between them (norms, RoPE, attention over the rank's own K/V heads) is v15's, run on
fewer heads. Collectives go through torch.distributed, so that NCCL's are captured in v07's CUDA
graphs as any kernel is."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from torchlet.contract import TorchletError

from ..v15_chunked_prefill import FusedContextAttention, FusedOps, PackedWeights, PagedDecoder
from .shard import Shard, ShardCheckpoint, shard_checkpoint

__all__ = ["ShardedModel", "ShardedOps", "ShardedWeights", "VocabShard", "collective"]


def collective(op, *args, **kwargs):
    """A torch.distributed collective; a rank that stopped or never answers (gloo: the peer
    closed its connection, or the group's timeout passed) is a TorchletError saying so."""
    try:
        return op(*args, **kwargs)
    except RuntimeError as e:  # DistBackendError is one
        raise TorchletError(f"tensor parallel: {op.__name__} failed, a rank stopped or did not "
                            f"answer ({str(e).strip().splitlines()[0][:200]})") from None


@dataclass
class VocabShard:
    """A rank's rows of the embedding, indexed as the whole table is: token ids outside its
    rows look up zeros, and one all-reduce sums the ranks' lookups into every token's row. (A
    dataclass, so that a graph's constants find its table as they find a Weights' tensors.)"""

    table: torch.Tensor
    vocab: range

    def __getitem__(self, token_ids: torch.Tensor) -> torch.Tensor:
        local = token_ids - self.vocab.start
        mine = (local >= 0) & (local < len(self.vocab))
        rows = self.table[local.clamp(0, len(self.vocab) - 1)] * mine.unsqueeze(-1)
        collective(dist.all_reduce, rows)
        return rows


class ShardedWeights(PackedWeights):
    """v13's packed weights of a rank's shard, the embedding a VocabShard when there are other
    ranks."""

    @classmethod
    def from_checkpoint(cls, ckpt, device="cpu", dtype=torch.float32):
        weights = super().from_checkpoint(ckpt, device, dtype)
        if isinstance(ckpt, ShardCheckpoint):
            weights.embed = VocabShard(weights.embed, ckpt.shard.vocab)
        return weights


class ShardedOps(FusedOps):
    """v13's ops with the three places a Megatron split meets the other ranks: o's and down's
    products (each rank's a partial sum) summed by an all-reduce, and the LM head's logit slices
    gathered. Overrides, so the layer loop's own self.mlp and the passes' output_projection run
    them. Built only in a group of more than one rank (ShardedModel)."""

    Weights = ShardedWeights
    shard: Shard  # the rank's shard, set by the model part that builds these ops
    norms_fuse = False  # the MLP's partial sum meets the other ranks' before it joins the stream

    def output_projection(self, out: torch.Tensor, w) -> torch.Tensor:
        """v13's o projection of this rank's heads, a partial sum, summed over the ranks."""
        partial_sum = super().output_projection(out, w)
        collective(dist.all_reduce, partial_sum)
        return partial_sum

    def mlp(self, x: torch.Tensor, w) -> torch.Tensor:
        """v13's MLP over this rank's share of the intermediate, a partial sum, summed over the
        ranks."""
        partial_sum = super().mlp(x, w)
        collective(dist.all_reduce, partial_sum)
        return partial_sum

    def lm_head(self, weights, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the whole vocabulary: each rank's slice, padded to the common width,
        gathered from every rank, the padding cut."""
        mine, shard = super().lm_head(weights, hidden), self.shard
        if mine.shape[-1] < shard.vocab_width:
            mine = torch.nn.functional.pad(mine, (0, shard.vocab_width - mine.shape[-1]))
        slices = [torch.empty_like(mine) for _ in range(shard.world)]
        collective(dist.all_gather, slices, mine.contiguous())
        return torch.cat(slices, dim=-1)[..., :shard.vocab_size]


class ShardedModel:
    """The model part: v15's decoder (v08's, composing v13's ops and memory) over this rank's
    shard. Built once per engine: it reads its rank and world from the process group, if there
    is one, and narrows the assembly's checkpoint and config to its shard, so that the K/V
    memory the parts after it build holds only its KV heads and the runner loads only its
    weights."""

    @classmethod
    def assemble(cls, a) -> PagedDecoder:
        rank, world = ((dist.get_rank(), dist.get_world_size()) if dist.is_initialized()
                       else (0, 1))
        shard = Shard.of(a.config, rank, world)
        if world > 1:
            a.checkpoint = shard_checkpoint(a.checkpoint, shard)
            a.config = a.checkpoint.config
        decoder = PagedDecoder()
        if world > 1:
            decoder.ops = ShardedOps().for_device(a.device, a.dtype)
            decoder.ops.shard = shard
        else:  # a group of one is v15's model: no collective to run
            decoder.ops = FusedOps().for_device(a.device, a.dtype)
        decoder.Memory = FusedContextAttention
        decoder.shard = shard  # what the engine asks of the model (contract ShardedModelPart)
        return decoder
