"""The physical floor of a workload: the least time any engine could take on a given GPU.

Decode is bound by memory: each decode pass reads every weight once, and each decoding request
reads the K/V of its whole context. Prefill is bound by compute: its matmuls and causal
attention at the GPU's dense bf16 rate. No engine overlaps a request's prefill with its own
decode, so the floor adds the two. Everything here is counted from the model's shapes and the
workload's lengths; the hardware enters only through the two rates.
"""
from __future__ import annotations

from dataclasses import dataclass

from torchlet.checkpoints import expected_shapes
from torchlet.contract import ModelConfig

from .workloads import Workload

H200_BANDWIDTH = 4.3e12     # bytes/s: device-to-device copy bandwidth measured on the H200
H100_RATED_BANDWIDTH = 3.35e12  # bytes/s: the H100 SXM's HBM3 as its spec sheet rates it
H200_BF16_FLOPS = 790e12    # FLOP/s: dense bf16 matmul rate reachable on the H200


def weight_bytes(config: ModelConfig, dtype_bytes: int = 2) -> int:
    """Bytes of every parameter; tied embeddings count once (the lm_head reads the same matrix)."""
    return dtype_bytes * sum(_numel(s) for s in expected_shapes(config).values())


def step_bytes(config: ModelConfig, batch: int, context: int, dtype_bytes: int = 2) -> int:
    """Bytes one decode step must read: every weight once, and each of `batch` requests' K/V of
    `context` tokens. Over the bandwidth, the step's floor."""
    return weight_bytes(config, dtype_bytes) + batch * context * config.kv_bytes_per_token(dtype_bytes)


def matmul_params_per_token(config: ModelConfig) -> int:
    """Weights a token multiplies through in the decoder layers (the embedding is a lookup)."""
    return sum(_numel(s) for name, s in expected_shapes(config).items()
               if name.startswith("model.layers.") and len(s) == 2)


@dataclass(frozen=True)
class Floor:
    weight_bytes: int
    kv_bytes_per_token: int     # ModelConfig.kv_bytes_per_token: K and V of every layer
    decode_passes: int          # the longest request's decode passes: all others fit inside them
    kv_tokens_read: int         # context tokens read over every decode pass of every request
    prefill_flops: float
    bandwidth: float
    flops_rate: float

    @property
    def decode_bytes(self) -> int:
        return self.decode_passes * self.weight_bytes + self.kv_tokens_read * self.kv_bytes_per_token

    @property
    def weight_seconds(self) -> float:
        return self.decode_passes * self.weight_bytes / self.bandwidth

    @property
    def kv_seconds(self) -> float:
        return self.kv_tokens_read * self.kv_bytes_per_token / self.bandwidth

    @property
    def prefill_seconds(self) -> float:
        return self.prefill_flops / self.flops_rate

    @property
    def seconds(self) -> float:
        return self.weight_seconds + self.kv_seconds + self.prefill_seconds

    def lines(self) -> list[str]:
        """The arithmetic, one line per term, in the units a reader checks it in."""
        return [
            f"weights: {self.weight_bytes / 1e6:,.1f} MB read by each of {self.decode_passes:,} "
            f"decode passes = {self.decode_passes * self.weight_bytes / 1e9:,.1f} GB "
            f"/ {self.bandwidth / 1e12:g} TB/s = {self.weight_seconds:.4f} s",
            f"KV: {self.kv_bytes_per_token / 1024:g} KiB per token x {self.kv_tokens_read:,} "
            f"context tokens read = {self.kv_tokens_read * self.kv_bytes_per_token / 1e9:,.1f} GB "
            f"/ {self.bandwidth / 1e12:g} TB/s = {self.kv_seconds:.4f} s",
            f"prefill: {self.prefill_flops / 1e12:,.1f} TFLOP / {self.flops_rate / 1e12:g} TFLOP/s "
            f"= {self.prefill_seconds:.4f} s",
            f"floor = {self.weight_seconds:.4f} + {self.kv_seconds:.4f} + "
            f"{self.prefill_seconds:.4f} = {self.seconds:.3f} s",
        ]


def physical_floor(config: ModelConfig, workload: Workload, bandwidth: float = H200_BANDWIDTH,
                   flops_rate: float = H200_BF16_FLOPS, dtype_bytes: int = 2) -> Floor:
    prompts = [len(p) for p in workload.prompts]
    # A request's first token comes out of its prefill; token t (t = 1 .. n-1) needs a decode
    # pass that feeds token t-1 at position P + t - 1 and attends over P + t cached tokens.
    kv_tokens = sum(sum(p + t for t in range(1, n)) for p, n in zip(prompts, workload.output_lens))
    c = config
    layer_flops = 2 * matmul_params_per_token(c) * sum(prompts)
    # Causal attention: QK^T and PV, 2 FLOPs per multiply-add, over P(P+1)/2 (query, key) pairs.
    attention_flops = 2 * 2 * c.num_layers * c.num_heads * c.head_dim * sum(
        p * (p + 1) // 2 for p in prompts)
    lm_head_flops = 2 * c.vocab_size * c.hidden_size * len(prompts)  # the last row of each prompt
    return Floor(weight_bytes=weight_bytes(c, dtype_bytes),
                 kv_bytes_per_token=c.kv_bytes_per_token(dtype_bytes),
                 decode_passes=max(workload.output_lens) - 1, kv_tokens_read=kv_tokens,
                 prefill_flops=float(layer_flops + attention_flops + lm_head_flops),
                 bandwidth=bandwidth, flops_rate=flops_rate)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
