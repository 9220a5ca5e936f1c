"""What the benchmarks run: model shapes, random weights built in memory, and request lists.

Weights are random because only the cost is measured: a random model runs the same matmuls as a
trained one, and with eos ignored every request produces exactly the tokens it asks for.
"""
from __future__ import annotations

import dataclasses
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

# Qwen2.5-7B's and Qwen2.5-72B's shapes (untied): the tensor-parallel runs' middle model, and one
# whose bf16 weights (about 145 GB) do not fit on one H200.
QWEN25_7B = dataclasses.replace(
    QWEN25_05B, vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
    num_heads=28, num_kv_heads=4, head_dim=128, tie_embeddings=False)
QWEN25_72B = dataclasses.replace(
    QWEN25_7B, hidden_size=8192, intermediate_size=29568, num_layers=80, num_heads=64,
    num_kv_heads=8)

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

    def cut(self, n: int, vocab_size: int) -> "Workload":
        """Every prompt's first n ids (folded into the vocabulary) and at most n tokens out: the
        same requests, small enough for a dry run on a CPU."""
        return Workload(f"{self.name}, cut to {n}", tuple(tuple(t % vocab_size for t in p[:n])
                                                          for p in self.prompts),
                        tuple(min(o, n) for o in self.output_lens))

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


def scaled(config: ModelConfig, layers: int | None = None, scale: int = 1) -> ModelConfig:
    """`config` with `layers` layers, and its widths (hidden, head_dim, intermediate, vocabulary)
    divided by `scale`, the heads kept: the same split over ranks at a fraction of the bytes."""
    if layers is not None and layers < 1 or scale < 1:
        raise TorchletError(f"--layers and --scale must be at least 1, got {layers} and {scale}")
    widths = ("hidden_size", "head_dim", "intermediate_size", "vocab_size")
    if any(getattr(config, w) % scale for w in widths) or config.head_dim // scale % 2:
        raise TorchletError(f"--scale {scale} does not divide the shape's widths "
                            f"({', '.join(f'{w} {getattr(config, w)}' for w in widths)}) into "
                            f"whole numbers with an even head_dim")
    return dataclasses.replace(config, num_layers=layers or config.num_layers,
                               **{w: getattr(config, w) // scale for w in widths})


def draw(name: str, shape, fan_in: int, generator, device, dtype) -> torch.Tensor:
    """A random tensor of `shape` for the tensor `name`: norms near one, biases small, the
    embedding unit-variance, projections scaled by their full input width (fan_in) so that
    their outputs have unit variance and activations stay finite in bf16 through many layers."""
    t = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    if name.endswith("norm.weight"):
        t = t.mul_(0.1).add_(1.0)
    elif name.endswith(".bias"):
        t = t.mul_(0.1)
    elif name != "model.embed_tokens.weight":
        t = t.div_(fan_in ** 0.5)
    return t.to(dtype)


def random_checkpoint(config: ModelConfig, seed: int = 0, device="cpu",
                      dtype=torch.float32) -> Checkpoint:
    """Every tensor of `config` drawn (draw) from one seeded generator, on `device` directly (no
    host copy of a GPU model)."""
    g = torch.Generator(device=device).manual_seed(seed)
    return Checkpoint(config, {name: draw(name, shape, shape[-1], g, device, dtype)
                               for name, shape in expected_shapes(config).items()})
