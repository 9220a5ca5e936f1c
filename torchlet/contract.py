"""The engine contract: the one module of plain types shared by implementations, specs and harness.

Token ids in, token ids out. A version package under `implementations/` declares

    CAPABILITIES: tuple[str, ...]   # cumulative: a version repeats what its predecessor declares
    def build(checkpoint: Checkpoint, *, device="cpu", dtype=torch.float32, **options) -> Engine
    layers                          # a module with the functions of the `Layers` protocol

and each capability below promises the methods listed with it. Specs reach engines only through
these names; nothing private.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import torch

# Capabilities, in the order the versions introduce them. A spec declares the one it needs.
GENERATE = "generate"                   # v00: Engine.generate, Engine.logits, `layers`
RAGGED_BATCH = "ragged_batch"           # v01_0: Engine.forward_ragged (req_indptr)
SPLIT_GQA = "split_gqa"                 # v01_1: `layers` also exposes the attention phases
KV_CACHE = "kv_cache"                   # v02: Engine.prefill / decode / cache access
REQUEST_STATES = "request_states"       # v03: StepEngine (add_request / step / abort)
CONTINUOUS_BATCHING = "continuous_batching"  # v04: admission under limits, arrivals mid-run
DECODE_SLOTS = "decode_slots"           # v05: slot_of(request_id)
STATIC_BUFFERS = "static_buffers"       # v06: decode_buffers()
GRAPH_REPLAY = "graph_replay"           # v07: graph_stats()
PAGED_KV = "paged_kv"                   # v08: block_tables(), BlockPool
TRITON_BASICS = "triton_basics"         # v09: Triton rms_norm / rope / swiglu
TRITON_PAGED = "triton_paged"           # v10: Triton paged decode attention + KV store

ALL_CAPABILITIES = (
    GENERATE, RAGGED_BATCH, SPLIT_GQA, KV_CACHE, REQUEST_STATES, CONTINUOUS_BATCHING,
    DECODE_SLOTS, STATIC_BUFFERS, GRAPH_REPLAY, PAGED_KV, TRITON_BASICS, TRITON_PAGED,
)


class TorchletError(Exception):
    """Base of every error the harness or an engine raises on purpose."""


class RequestError(TorchletError, ValueError):
    """A request the engine refuses: the message names the problem."""


class CheckpointError(TorchletError):
    """A checkpoint that is missing, corrupt or of an unsupported family."""


class UnknownVersionError(TorchletError, LookupError):
    """A version name the registry does not know."""


@dataclass(frozen=True)
class ModelConfig:
    """The architecture of a Qwen2/Llama-family decoder, in Hugging Face's terms."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_position: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    qkv_bias: bool = False
    tie_embeddings: bool = False
    family: str = "qwen2"  # "qwen2" or "llama": only the oracle and loaders care
    eos_token_ids: tuple[int, ...] = ()

    @property
    def group_size(self) -> int:
        """Query heads per KV head."""
        return self.num_heads // self.num_kv_heads


@dataclass
class Checkpoint:
    """A config and its tensors, named as in Hugging Face's Qwen2/Llama state dicts."""

    config: ModelConfig
    tensors: Mapping[str, torch.Tensor]

    def layer(self, i: int, name: str) -> torch.Tensor | None:
        return self.tensors.get(f"model.layers.{i}.{name}")


@dataclass(frozen=True)
class GenerationParams:
    """What a request asks for. Decoding is greedy (argmax); sampling comes in a later version."""

    max_new_tokens: int = 16
    eos_token_ids: tuple[int, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def stops_at(self, token: int) -> FinishReason | None:
        if not self.ignore_eos and token in self.eos_token_ids:
            return FinishReason.EOS
        if token in self.stop_token_ids:
            return FinishReason.STOP
        return None


class RequestState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(enum.Enum):
    EOS = "eos"
    STOP = "stop"
    LENGTH = "length"
    ABORTED = "aborted"


@dataclass
class RequestOutput:
    """A request as the step-wise API reports it (request_states and later)."""

    request_id: int
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    state: RequestState = RequestState.WAITING
    finish_reason: FinishReason | None = None


def check_request(prompt: Sequence[int], params: GenerationParams, config: ModelConfig) -> None:
    """Refuse, with a message that names the problem, a request no engine can serve."""
    if len(prompt) == 0:
        raise RequestError("empty prompt: a request needs at least one token id")
    bad = [t for t in prompt if not isinstance(t, int) or not 0 <= t < config.vocab_size]
    if bad:
        raise RequestError(
            f"token ids outside the vocabulary [0, {config.vocab_size}): {bad[:5]}")
    if not isinstance(params.max_new_tokens, int) or params.max_new_tokens < 1:
        raise RequestError(f"max_new_tokens must be at least 1, got {params.max_new_tokens!r}")
    total = len(prompt) + params.max_new_tokens
    if total > config.max_position:
        raise RequestError(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({params.max_new_tokens}) = {total} "
            f"exceeds the model's context of {config.max_position} tokens")


@runtime_checkable
class Engine(Protocol):
    """Capability `generate`: every engine has these."""

    config: ModelConfig

    def generate(self, prompts: list[list[int]], params: GenerationParams) -> list[list[int]]:
        """Greedy continuation of each prompt: new token ids only, stopping at eos/stop ids
        (included in the output) or after `params.max_new_tokens`."""
        ...

    def stream(self, prompt: list[int], params: GenerationParams) -> Iterator[int]:
        """The same tokens as generate([prompt], params)[0], yielded as each is chosen."""
        ...

    def logits(self, token_ids: list[int]) -> torch.Tensor:
        """Float logits [len(token_ids), vocab] of one sequence, for parity checks."""
        ...


class Layers(Protocol):
    """Capability `generate`: the model's building blocks, on one flat sequence of tokens.

    Shapes: x [tokens, hidden]; q/k [tokens, heads, head_dim]; positions [tokens] (int64).
    `w` is the layer's tensors keyed by their Hugging Face names inside the layer
    (e.g. "self_attn.q_proj.weight").
    """

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor: ...

    def apply_rope(self, x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor: ...

    def attention(self, x: torch.Tensor, positions: torch.Tensor, w: Mapping[str, torch.Tensor],
                  config: ModelConfig) -> torch.Tensor: ...

    def mlp(self, x: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor: ...

    def decoder_layer(self, x: torch.Tensor, positions: torch.Tensor,
                      w: Mapping[str, torch.Tensor], config: ModelConfig) -> torch.Tensor: ...


def layer_tensors(checkpoint: Checkpoint, i: int) -> dict[str, torch.Tensor]:
    """The tensors of decoder layer i, keyed by their names inside the layer."""
    prefix = f"model.layers.{i}."
    return {k[len(prefix):]: v for k, v in checkpoint.tensors.items() if k.startswith(prefix)}


def cast_tensors(tensors: Mapping[str, torch.Tensor], device: Any, dtype: torch.dtype) -> dict:
    return {k: v.to(device=device, dtype=dtype) for k, v in tensors.items()}


def flatten(prompts: Iterable[Sequence[int]]) -> list[int]:
    return [t for p in prompts for t in p]
