"""What the benchmarks run: model shapes, random weights built in memory, and request lists.

Weights are random because only the cost is measured: a random model runs the same matmuls as a
trained one, and with eos ignored every request produces exactly the tokens it asks for.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from torchlet.checkpoints import expected_shapes
from torchlet.contract import Checkpoint, GenerationParams, ModelConfig, TorchletError

# Qwen2.5-0.5B's shape: the model nano-vllm's bench.py is usually quoted with.
QWEN25_05B = ModelConfig(
    vocab_size=151936, hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14,
    num_kv_heads=2, head_dim=64, max_position=32768, rope_theta=1000000.0, rms_eps=1e-6,
    qkv_bias=True, tie_embeddings=True, family="qwen2")

# Qwen3-0.6B's shape: the model of nano-vllm's own benchmark. head_dim 128 is declared (16 heads
# of it on a hidden size of 1024) and each head's q and k are RMS-normed before RoPE; no bias.
QWEN3_06B = ModelConfig(
    vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_layers=28, num_heads=16,
    num_kv_heads=8, head_dim=128, max_position=40960, rope_theta=1000000.0, rms_eps=1e-6,
    qkv_bias=False, tie_embeddings=True, family="qwen3", qk_norm=True)

# Wide enough on a CPU that recomputing a sequence costs visibly more than one new row, with few
# layers because versions that serve one request at a time pay Python overhead per layer per
# token. max_position leaves room for a CPU smoke run of the GPU workload's lengths.
CPU_MODEL = ModelConfig(
    vocab_size=4096, hidden_size=256, intermediate_size=704, num_layers=2, num_heads=8,
    num_kv_heads=2, head_dim=32, max_position=2048, rope_theta=10000.0, rms_eps=1e-6,
    qkv_bias=True, tie_embeddings=True, family="qwen2")

# nano-vllm bench.py's numbers: seed, requests, id range, prompt and output length ranges.
NANO_VLLM = dict(seed=0, num_requests=256, max_id=10000, min_len=100, max_input=1024,
                 max_output=1024)
NANO_VLLM_TOTALS = (142827, 133966)  # prompt tokens, output tokens: asserted on every draw


@dataclass(frozen=True)
class Workload:
    """Requests that all arrive at time 0: prompt ids and how many tokens each asks for."""

    name: str
    prompts: tuple[tuple[int, ...], ...]
    output_lens: tuple[int, ...]
    shared_prefix: int = 0  # leading tokens every prompt has in common (with_shared_prefix)

    @property
    def num_requests(self) -> int:
        return len(self.prompts)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)

    @property
    def output_tokens(self) -> int:
        return sum(self.output_lens)

    def params(self, i: int) -> GenerationParams:
        return GenerationParams(max_new_tokens=self.output_lens[i], ignore_eos=True)

    def head(self, n: int) -> "Workload":
        return Workload(self.name, self.prompts[:n], self.output_lens[:n], self.shared_prefix)

    def describe(self) -> str:
        shared = f" sharing a {self.shared_prefix}-token prefix" if self.shared_prefix else ""
        return (f"{self.name}: {self.num_requests} requests{shared}, {self.prompt_tokens} prompt "
                f"tokens, {self.output_tokens} output tokens")


def with_shared_prefix(workload: Workload, n: int, seed: int, vocab_size: int,
                       max_position: int) -> Workload:
    """Every prompt of `workload` after the same n random ids (a "system prompt"), so a prefix
    cache has something to find. The prefix has its own generator, seeded from the workload's
    seed, so the requests' own ids and lengths stay those of the plain workload."""
    if n < 0:
        raise TorchletError(f"--shared-prefix must be at least 0, got {n}")
    if n == 0:
        return workload
    longest = max(len(p) + out for p, out in zip(workload.prompts, workload.output_lens)) + n
    if longest > max_position:
        raise TorchletError(f"--shared-prefix {n}: a request would reach {longest} tokens, beyond "
                            f"the model's context of {max_position}")
    rng = random.Random(f"shared-prefix:{seed}")  # a str seed is hashed the same in every process
    prefix = tuple(rng.randrange(vocab_size) for _ in range(n))
    return Workload(f"{workload.name}+prefix{n}", tuple(prefix + p for p in workload.prompts),
                    workload.output_lens, n)


def nano_vllm_workload() -> Workload:
    """nano-vllm's bench.py draw, in its order: every prompt (its length, then its ids) in one
    comprehension, then every output length."""
    n = NANO_VLLM
    rng = random.Random(n["seed"])
    prompts = tuple(tuple(rng.randint(0, n["max_id"])
                          for _ in range(rng.randint(n["min_len"], n["max_input"])))
                    for _ in range(n["num_requests"]))
    outputs = tuple(rng.randint(n["min_len"], n["max_output"]) for _ in range(n["num_requests"]))
    workload = Workload("nano-vllm", prompts, outputs)
    totals = (workload.prompt_tokens, workload.output_tokens)
    assert totals == NANO_VLLM_TOTALS, f"nano-vllm workload drew {totals}, not {NANO_VLLM_TOTALS}"
    return workload


def cpu_workload(num_requests: int = 32, seed: int = 0, min_len: int = 10, max_len: int = 100,
                 vocab_size: int = CPU_MODEL.vocab_size) -> Workload:
    """Prompt and output lengths uniform in [min_len, max_len], drawn the way nano-vllm draws."""
    rng = random.Random(seed)
    prompts = tuple(tuple(rng.randint(0, vocab_size - 1) for _ in range(rng.randint(min_len, max_len)))
                    for _ in range(num_requests))
    outputs = tuple(rng.randint(min_len, max_len) for _ in range(num_requests))
    return Workload(f"cpu-{num_requests}", prompts, outputs)


def random_checkpoint(config: ModelConfig, seed: int = 0, device="cpu",
                      dtype=torch.float32) -> Checkpoint:
    """Every tensor of `config` drawn from one seeded generator, on `device` directly (no host
    copy of a GPU model). Projections have unit-variance outputs so activations stay finite in
    bf16 through 24 layers."""
    g = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for name, shape in expected_shapes(config).items():
        t = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * t
        elif name.endswith(".bias"):
            t = 0.1 * t
        elif name != "model.embed_tokens.weight":
            t = t / shape[-1] ** 0.5
        tensors[name] = t.to(dtype)
    return Checkpoint(config, tensors)
