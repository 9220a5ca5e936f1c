"""v17's model with its matrices kept as grouped integers (QuantizedTensor): the weights part
loads them as the checkpoint stores them (a GGUF file's Q8_0/Q4_0/Q4_1 blocks) or quantizes
float ones (quantize.py), and the ops read them in their products (qlinear.py). Everything else
(norms, RoPE, attention, the K/V cache, the passes and graphs) is v17's.

Where the integers meet the model: every projection goes through FusedOps.project (the MLP's
down product too, v13's gemv taking float matrices only: takes_gemv), the LM head through its
own line (overridden here to take project), and the
embedding is a lookup that dequantizes only the rows it reads (QuantizedEmbedding).

On a CPU in float32 the layers between the products are C++ ops too (QuantizedOps.cpu_layers
and CpuAttention; see cpu_kernels.py): once the products read the integers (13 ms of a Q4_1
token of the default model at 1 thread), most of what was left of a 25 ms token was small
PyTorch ops, a few microseconds of dispatch each on a row of 576 floats: the decode attention's
gathers, einsums and masks (5 ms), the K/V store (1.5 ms), 60 residual adds and RMSNorms (1.9
ms), 30 rotations (1.4 ms)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from torchlet.contract import BuildError, BuildOption, Checkpoint, QuantizedTensor, dequantized

from ..v17_speculative_decoding import FusedOps, InvariantModel, ShardedWeights, layers
from . import cpu_kernels, qlinear
from .quantize import quantize

FORMATS = ("auto", "float", "gguf", "int8", "int4")
PACKED = ShardedWeights.PACKED  # v13's stacks: q/k/v into one matrix, gate/up into another
QKV = next((name for name in PACKED if "qkv" in name), None)  # None: q/k/v unstacked
EMBED = "model.embed_tokens.weight"


@dataclass
class QuantizedEmbedding:
    """The embedding table kept quantized: a lookup dequantizes the rows it reads. (A dataclass,
    so that a graph's constants find its tensors as they find a Weights'.)"""

    table: QuantizedTensor
    dtype: torch.dtype

    def __getitem__(self, token_ids: torch.Tensor) -> torch.Tensor:
        return self.table.select_rows(token_ids).dequantize().to(self.dtype)


class QuantizedWeights(ShardedWeights):
    """v16's weights, with the checkpoint's QuantizedTensors kept as they are: each layer's
    q/k/v and gate/up stacked (QuantizedTensor.cat) as v13 stacks float ones, the embedding a
    QuantizedEmbedding, the LM head the table itself where they are tied."""

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint, device="cpu", dtype=torch.float32):
        ckpt = uniform_stacks(ckpt)
        held = {k: v.to(device) for k, v in ckpt.tensors.items()
                if isinstance(v, QuantizedTensor)}
        if not held:
            return super().from_checkpoint(ckpt, device, dtype)
        # v00-v16's loading casts and stacks float tensors: empty stand-ins take the quantized
        # ones' places through it, and are replaced below
        stand_ins = {k: torch.empty(0) for k in held}
        weights = super().from_checkpoint(replace(ckpt, tensors={**ckpt.tensors, **stand_ins}),
                                          device, dtype)
        for i, layer in enumerate(weights.layers):
            prefix = f"model.layers.{i}."
            mine = {k[len(prefix):]: v for k, v in held.items() if k.startswith(prefix)}
            for packed, parts in PACKED.items():
                if f"{parts[0]}.weight" in mine:
                    layer[f"{packed}.weight"] = QuantizedTensor.cat(
                        [mine.pop(f"{p}.weight") for p in parts])
            layer.update(mine)
        if EMBED in held:
            weights.embed = QuantizedEmbedding(held[EMBED], dtype)
        head = EMBED if ckpt.config.tie_embeddings else "lm_head.weight"
        if head in held:
            weights.lm_head = held[head]
        return weights


def holds_quantized(ckpt: Checkpoint) -> bool:
    return any(isinstance(t, QuantizedTensor) for t in ckpt.tensors.values())


def uniform_stacks(ckpt: Checkpoint) -> Checkpoint:
    """The checkpoint with every stack (a layer's q/k/v, its gate/up) all quantized alike or all
    float: a GGUF file may store one part of a stack in a format v18 does not read (kept float
    by the loader), and then the stack is made float."""
    tensors = dict(ckpt.tensors)
    for i in range(ckpt.config.num_layers):
        for parts in PACKED.values():
            names = [f"model.layers.{i}.{p}.weight" for p in parts]
            stack = [tensors.get(n) for n in names]
            quantized = [t for t in stack if isinstance(t, QuantizedTensor)]
            if quantized and (len(quantized) < len(stack)
                              or len({t.layout for t in quantized}) > 1):
                for n, t in zip(names, stack):
                    if isinstance(t, QuantizedTensor):
                        tensors[n] = t.dequantize()
    return replace(ckpt, tensors=tensors)


class QuantizedOps(FusedOps):
    """v13's ops whose products read QuantizedTensors with the quantized kernels; a float matrix
    goes through v13's products as before. Where cpu_layers (float32 on a CPU, Triton off, the
    extension built), the norms and RoPE between the products are C++ ops too (cpu_kernels.py),
    as v09's layers are kernels where on_triton."""

    Weights = QuantizedWeights
    # Whether the layers run the C++ ops: chosen once, for the engine's device and dtype
    # (for_device), not asked of every tensor. A shared instance runs PyTorch.
    cpu_layers = False

    def for_device(self, device, dtype) -> "QuantizedOps":
        ops = super().for_device(device, dtype)
        ops.cpu_layers = not ops.on_triton and cpu_kernels.takes(device, dtype)
        return ops

    def project(self, x, weight, bias=None):
        if not self.gemv_reads(weight):  # a QuantizedTensor: the quantized products
            return qlinear.linear(x, weight, bias)
        return super().project(x, weight, bias)

    def gemv_reads(self, weight) -> bool:
        """Float matrices only: v13's products read no integers, so a quantized matrix goes to
        the quantized kernels (project), and at one row the MLP's norms stay launches."""
        return not isinstance(weight, QuantizedTensor)

    def lm_head(self, weights, hidden: torch.Tensor) -> torch.Tensor:
        if isinstance(weights.lm_head, QuantizedTensor):
            return self.project(hidden, weights.lm_head)
        return super().lm_head(weights, hidden)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if self.cpu_layers:
            return cpu_kernels.rms_norm(x, weight, eps)
        return super().rms_norm(x, weight, eps)

    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cpu_layers:
            return cpu_kernels.add_rms_norm(x, residual, weight, eps)
        return super().add_rms_norm(x, residual, weight, eps)

    def qkv_heads(self, x, positions, w, config):
        """v13's phases 1-4; with cpu_layers, phases 2-4 one op (rope_split) on the packed row,
        its cos and sin v05's, once per pass (Qwen3's per-head norms, or no stack, v13's way)."""
        if not self.cpu_layers or config.qk_norm or f"{QKV}.weight" not in w:
            return super().qkv_heads(x, positions, w, config)
        qkv = self.project(x, w[f"{QKV}.weight"], w.get(f"{QKV}.bias"))
        cos, sin = self.rope_cos_sin(positions, config.head_dim, config.rope_theta, qkv.dtype)
        q, k, v = cpu_kernels.rope_split(qkv, cos, sin, config.num_heads, config.num_kv_heads)
        return self.group_queries(q, config.num_kv_heads), k, v


class CpuAttention(layers.Memory):  # layers.Memory: v13's FusedContextAttention, as v17 exports it
    """v13's memory whose K/V store and decode attention are the C++ ops: the attention reads
    each request's keys and values where its block table says they lie, no gather."""

    def __init__(self, model):
        super().__init__(model)
        self.functions = (cpu_kernels.store_kv, cpu_kernels.paged_decode_attention)


class QuantizedModel(InvariantModel):
    """The model part: v17's, its checkpoint's matrices first made what the weights option asks
    (auto: as stored), its ops QuantizedOps where any matrix is quantized, and its memory
    CpuAttention where they run the C++ layers. With quantized matrices it runs on one rank:
    splitting a quantized matrix across ranks is not written, nor is v17's batch_invariant mode
    (the quantized products choose their kernels by the row count)."""

    OPTIONS = InvariantModel.OPTIONS + (
        BuildOption("weights", str, "auto", "how the matrices are held: auto (as the checkpoint "
                    "stores them), float, gguf (the checkpoint's own quantized blocks, required), "
                    "int8 (per output channel) or int4 (groups of group_size columns)"),
        BuildOption("group_size", int, 32, "columns an int4 scale covers (32, 64 or 128)",
                    minimum=32),
    )

    @classmethod
    def assemble(cls, a):
        a.checkpoint = held_as(a.checkpoint, a.options["weights"], a.options["group_size"])
        if not holds_quantized(a.checkpoint):
            return super().assemble(a)  # float matrices: v17's model and engine
        if dist.is_initialized() and dist.get_world_size() > 1:
            raise BuildError("quantized weights run on one rank: build with weights='float' for "
                             "tensor parallelism")
        if a.options["batch_invariant"]:
            raise BuildError("batch_invariant is written for float matrices: build with "
                             "weights='float'")
        decoder = super().assemble(a)
        decoder.ops = QuantizedOps().for_device(a.device, a.dtype)
        if decoder.ops.cpu_layers:
            decoder.Memory = CpuAttention
        return decoder


def held_as(ckpt: Checkpoint, weights: str, group_size: int) -> Checkpoint:
    """The checkpoint with its matrices as the weights option asks (see QuantizedModel)."""
    if weights not in FORMATS:
        raise BuildError(f"weights must be one of {', '.join(FORMATS)}, got {weights!r}")
    if group_size not in (32, 64, 128):
        raise BuildError(f"group_size must be 32, 64 or 128, got {group_size}")
    if weights == "auto":
        return ckpt
    if weights == "gguf":
        if not holds_quantized(ckpt):
            raise BuildError("weights='gguf' needs a checkpoint with quantized blocks (a GGUF "
                             "file's); this one holds float tensors: use int8 or int4")
        return ckpt
    floats = dequantized(ckpt.tensors)
    if weights == "float":
        return replace(ckpt, tensors=floats)
    made = {}
    for name, t in floats.items():
        # the embedding (the LM head, where tied) stays 8-bit under int4: every logit reads it,
        # and 16 levels a group there cost most of int4's accuracy (GGUF files do the same)
        fmt = "int8" if name in (EMBED, "lm_head.weight") else weights
        q = quantize(t, fmt, group_size) if t.dim() == 2 else None
        made[name] = t if q is None else q
    return replace(ckpt, tensors=made)
