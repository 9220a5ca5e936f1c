"""The contract's values: the capability names, the errors, a checkpoint and its config, a
request's settings and outcome, and the checks every engine runs on what it is given. Plain
types that implementations, specs and harness pass to each other; imported as torchlet.contract."""
from __future__ import annotations

import enum
import itertools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import torch

from .grammar import Grammar

# Capabilities, in the order the versions introduce them. A spec declares the one it needs.
GENERATE = "generate"                   # v00: GenerateAPI (generate, stream, logits), `layers`
RAGGED_BATCH = "ragged_batch"           # v01_0: RaggedBatchAPI.forward_ragged (req_indptr)
SPLIT_GQA = "split_gqa"                 # v01_1: `layers` also exposes the attention phases
KV_CACHE = "kv_cache"                   # v02: KVCacheAPI: prefill / decode / cache access
REQUEST_STATES = "request_states"       # v03: RequestStatesAPI (add_request / step / abort)
CONTINUOUS_BATCHING = "continuous_batching"  # v04: admission under limits, arrivals mid-run
DECODE_LANES = "decode_lanes"           # v05: lane_of(request_id)
STATIC_BUFFERS = "static_buffers"       # v06: decode_buffers()
GRAPH_REPLAY = "graph_replay"           # v07: graph_stats()
PAGED_KV = "paged_kv"                   # v08: block_tables(), BlockPool
TRITON_BASICS = "triton_basics"         # v09: Triton rms_norm / rope / swiglu
TRITON_PAGED = "triton_paged"           # v10: Triton paged decode attention + KV store
SAMPLING = "sampling"                   # v11: temperature, top-k, top-p, min-p and seeds
PREFIX_CACHE = "prefix_cache"           # v12: shared prompt prefixes, reference-counted blocks
FUSED = "fused"                         # v13: one GEMM for q/k/v and for gate/up, fused attention
OVERLAP = "overlap"                     # v14: the next decode launched before a step's read-back
CHUNKED_PREFILL = "chunked_prefill"     # v15: one token budget a step, prompts computed in slices
TENSOR_PARALLEL = "tensor_parallel"     # v16: the model sharded over the ranks of a process group
SPECULATIVE = "speculative"             # v17: k guessed tokens verified in one pass, the rejected rolled back
QUANTIZED_WEIGHTS = "quantized_weights"  # v18: weights kept as grouped integers, products read them so
STRUCTURED_OUTPUT = "structured_output"  # v19: a request's grammar masks its draws (GenerationParams.grammar)
LIVE_LANES = "live_lanes"               # v20: a request's lane may move down; a step runs the live lanes

ALL_CAPABILITIES = (
    GENERATE, RAGGED_BATCH, SPLIT_GQA, KV_CACHE, REQUEST_STATES, CONTINUOUS_BATCHING,
    DECODE_LANES, STATIC_BUFFERS, GRAPH_REPLAY, PAGED_KV, TRITON_BASICS, TRITON_PAGED, SAMPLING,
    PREFIX_CACHE, FUSED, OVERLAP, CHUNKED_PREFILL, TENSOR_PARALLEL, SPECULATIVE,
    QUANTIZED_WEIGHTS, STRUCTURED_OUTPUT, LIVE_LANES,
)


class TorchletError(Exception):
    """Base of every error the harness or an engine raises on purpose."""


class RequestError(TorchletError, ValueError):
    """A request the engine refuses: the message names the problem."""


class CheckpointError(TorchletError):
    """A checkpoint that is missing, corrupt or of an unsupported family."""


class UnknownVersionError(TorchletError, LookupError):
    """A version name the registry does not know."""


class BuildError(TorchletError, TypeError):
    """A build option refused: a value of the wrong type or out of range (a TypeError too, as
    a build's refusal of an option it does not take is)."""


@dataclass(frozen=True)
class ModelConfig:
    """The architecture of a Qwen2/Llama/Qwen3-family decoder, in Hugging Face's terms."""

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
    family: str = "qwen2"  # "qwen2", "llama" or "qwen3": only the oracle and loaders care
    eos_token_ids: tuple[int, ...] = ()
    # Qwen3's per-head norms: RMSNorm over each head's q and k (weights self_attn.q_norm and
    # self_attn.k_norm, [head_dim] each, shared by the heads), after the projection and before
    # RoPE. True for family "qwen3", whose checkpoints hold those tensors.
    qk_norm: bool = False

    @property
    def group_size(self) -> int:
        """Query heads per KV head."""
        return self.num_heads // self.num_kv_heads

    def kv_bytes_per_token(self, dtype: torch.dtype | int) -> int:
        """Bytes of K and V one token holds over every layer, for a torch dtype or an element
        size in bytes: 2 * layers * kv_heads * head_dim * itemsize. The one formula that a
        cache's accounting and the benchmark's floor both use."""
        itemsize = dtype if isinstance(dtype, int) else dtype.itemsize
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * itemsize


@dataclass
class Checkpoint:
    """A config and its tensors, named as in Hugging Face's Qwen2/Llama state dicts."""

    config: ModelConfig
    tensors: Mapping[str, torch.Tensor]

    def layer(self, i: int, name: str) -> torch.Tensor | None:
        return self.tensors.get(f"model.layers.{i}.{name}")


@dataclass(frozen=True)
class GenerationParams:
    """What a request asks for. The defaults decode greedily (argmax), which every version
    does; the other sampling settings need the `sampling` capability (v11), and a version
    without it refuses them. The filters apply in Hugging Face's order: temperature, top-k,
    top-p, min-p. A seeded request draws the same tokens wherever and whenever it runs.

    The types each setting takes, checked (check_params) when a request is added, before
    anything is queued; a RequestError names the setting and the type otherwise:
    max_new_tokens an int of at least 1; eos_token_ids and stop_token_ids token ids (ints), given
    as any iterable of them (a list as Hugging Face writes it, a tuple, a set) and kept as the
    tuple made of it here, once, which is what the engine reads: a one-shot iterator or a list
    changed afterwards cannot reach a step. A bare int is refused (one id is written (2,) or
    [2]). ignore_eos a bool; temperature, top_p and min_p real numbers, top_k an int, seed an
    int or None (check_sampling gives their ranges). bool is not taken for an int.

    The random stream is part of the contract, so an oracle can predict a seeded draw. The
    token at position n of a request (prompt included) is argmax_t p_t / E_t, E_t = -log(u_t),
    with p the filtered distribution and u_t a function of (seed, n, t) alone: seed taken
    modulo 2^63, lo and hi its low and high 32 bits, mix the lowbias32 hash
    (x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16, mod 2^32),
    key = mix(mix(mix(lo) ^ hi) ^ n), key2 = mix(key ^ 0x9e3779b9),
    u_t = ((mix(mix(key ^ t) ^ key2) >> 8) + 0.5) / 2^24, which lies strictly inside (0, 1) and
    needs float64 to be held exactly (float32 rounds it from 2^23 up, the all-ones hash to 1).

    grammar (structured_output, v19): None, or a contract Grammar (torchlet.contract.grammar)
    the harness compiled for the model's vocabulary. Each draw is then taken among the tokens
    the grammar allows after the request's tokens so far: the mask applies to the logits before
    temperature and the filters, so a draw the grammar allows is the same as without it
    (greedy, temperature, top-k, min-p), except under top-p, whose nucleus is taken over the
    allowed tokens' renormalised probabilities and may drop it. Once the grammar is complete
    only the request's eos and stop ids are allowed; with none of them, it finishes (STOP)."""

    max_new_tokens: int = 16
    eos_token_ids: tuple[int, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    temperature: float = 0.0    # 0: greedy
    top_k: int = 0              # 0: off
    top_p: float = 1.0          # 1: off
    min_p: float = 0.0          # 0: off
    seed: int | None = None     # None: a fresh seed per request
    grammar: Any = None         # a contract Grammar, or None: unconstrained

    def __post_init__(self):
        for name in ("eos_token_ids", "stop_token_ids"):
            ids = getattr(self, name)
            if _is_id_list(ids) and not isinstance(ids, tuple):
                object.__setattr__(self, name, tuple(ids))  # frozen: set once, here

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

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
    ERROR = "error"     # its own work failed in a step (see RequestStatesAPI.step); error says how


class TokenView(Sequence):
    """The first n ids of a list that is only ever appended to, read where they are: what an
    output's tokens are. It never changes (nothing changes what the list already holds), and
    making one copies nothing, so a step's outputs cost O(batch), not O(batch x tokens). It
    compares equal to a list or tuple of the same ids; list(view) is a copy of one's own."""

    __slots__ = ("_ids", "_n")
    __hash__ = None  # as a list's

    def __init__(self, ids: list, n: int | None = None):
        self._ids, self._n = ids, len(ids) if n is None else n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._ids[j] for j in range(*i.indices(self._n))]
        j = i + self._n if i < 0 else i
        if not 0 <= j < self._n:
            raise IndexError("token index out of range")
        return self._ids[j]

    def __iter__(self):
        return itertools.islice(self._ids, self._n)

    def __eq__(self, other) -> bool:
        if isinstance(other, (list, tuple, TokenView)):
            return len(other) == self._n and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __add__(self, other) -> list:
        return list(self) + list(other)

    def __radd__(self, other) -> list:
        return list(other) + list(self)

    def __repr__(self) -> str:
        return repr(list(self))


@dataclass
class RequestOutput:
    """A request as the step-wise API reports it (request_states and later). error is set for
    finish_reason ERROR alone: the exception that ended it, as "TypeError: message". tokens
    are those it had at the time, as a TokenView of its own list (or any list of ids): later
    tokens do not show in it."""

    request_id: int
    prompt: list[int]
    tokens: Sequence[int] = field(default_factory=list)
    state: RequestState = RequestState.WAITING
    finish_reason: FinishReason | None = None
    error: str | None = None


def _kind(value: Any) -> str:
    """How a refusal names a value: its type, then the value itself, kept short."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _is_id_list(value: Any) -> bool:
    """A list-like of ids: a str or a mapping iterates, but not over token ids."""
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, bytearray, Mapping))


def check_prompts(prompts: Any) -> list:
    """Refuse a generate() argument that is not a list of prompts; returns it as a list. Each
    prompt is then check_request's to judge."""
    if not _is_id_list(prompts):
        raise RequestError(f"generate takes a list of prompts, each a list of token ids; "
                           f"got {_kind(prompts)}")
    prompts = list(prompts)
    bare = [p for p in prompts if isinstance(p, numbers.Integral)]
    if bare:  # generate([5, 6]): one prompt, written without its own brackets
        raise RequestError(f"generate takes a list of prompts, each a list of token ids; got "
                           f"{_kind(bare[0])} where a prompt belongs "
                           f"(one prompt is [[5, 6]], not [5, 6])")
    return prompts


def check_request(prompt: Any, params: GenerationParams, config: ModelConfig, *,
                  sampling: bool = False, grammar: bool = False) -> list[int]:
    """Refuse, with a message that names the problem, a request no engine can serve, one that
    samples when the engine cannot (sampling=False), or one with a grammar when the engine
    cannot apply it (grammar=False). Returns the prompt as a list of Python ints (numpy
    integers are integers too; bool is not)."""
    if not _is_id_list(prompt):
        raise RequestError(f"a prompt is a list of token ids, got {_kind(prompt)}")
    prompt = list(prompt)
    if len(prompt) == 0:
        raise RequestError("empty prompt: a request needs at least one token id")
    # A prompt of plain ints (the usual one) is checked by its set of types: an isinstance
    # against numbers.Integral per id cost an 8,192-token prompt ~5 ms of a step's host time.
    if set(map(type, prompt)) != {int}:
        # bool is an int subclass and numpy's bool_ converts to one: both are refused, by name
        odd = [t for t in prompt if isinstance(t, bool) or not isinstance(t, numbers.Integral)]
        if odd:
            raise RequestError(f"token ids must be integers, got {_kind(odd[0])}")
        prompt = [int(t) for t in prompt]
    if min(prompt) < 0 or max(prompt) >= config.vocab_size:
        bad = [t for t in prompt if not 0 <= t < config.vocab_size]
        raise RequestError(
            f"token ids outside the vocabulary [0, {config.vocab_size}): {bad[:5]}")
    check_params(params)
    if params.top_k > config.vocab_size:
        raise RequestError(f"top_k must be at most the vocabulary's {config.vocab_size} tokens "
                           f"(0 is off), got {_kind(params.top_k)}")
    if not sampling and not params.greedy:
        raise RequestError(f"temperature={params.temperature!r} asks for sampling, and this "
                           f"version decodes greedily (temperature=0): sampling needs a version "
                           f"with the `{SAMPLING}` capability")
    if params.grammar is not None:
        if not grammar:
            raise RequestError(f"a grammar ({params.grammar.description}) needs a version with "
                               f"the `{STRUCTURED_OUTPUT}` capability")
        if params.grammar.vocab_size != config.vocab_size:
            raise RequestError(f"the grammar ({params.grammar.description}) was compiled for a "
                               f"vocabulary of {params.grammar.vocab_size} tokens; the model "
                               f"has {config.vocab_size}")
    total = len(prompt) + params.max_new_tokens
    if total > config.max_position:
        raise RequestError(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({params.max_new_tokens}) = {total} "
            f"exceeds the model's context of {config.max_position} tokens")
    return prompt


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_params(params: Any) -> None:
    """Refuse settings no step could run, naming the setting and the type it takes (the
    GenerationParams docstring lists them); a malformed one would otherwise fail at its first
    token, inside a step."""
    if not isinstance(params, GenerationParams):
        raise RequestError(f"params must be a GenerationParams, got {_kind(params)}")
    n = params.max_new_tokens
    if not _is_int(n) or n < 1:
        raise RequestError(f"max_new_tokens must be an int of at least 1, got {_kind(n)}")
    for name in ("eos_token_ids", "stop_token_ids"):
        ids = getattr(params, name)
        if not isinstance(ids, tuple):  # what __post_init__ left: not a list of anything
            hint = f" (one id is written ({ids},))" if _is_int(ids) else ""
            raise RequestError(f"{name} must be a list or tuple of token ids (ints), "
                               f"got {_kind(ids)}{hint}")
        odd = [t for t in ids if not _is_int(t)]
        if odd:
            raise RequestError(f"{name} must hold token ids (ints), got {_kind(odd[0])}")
    if not isinstance(params.ignore_eos, bool):
        raise RequestError(f"ignore_eos must be True or False, got {_kind(params.ignore_eos)}")
    check_sampling(params)
    check_grammar(params.grammar)


def check_grammar(grammar: Any) -> None:
    """Refuse a grammar setting that is not None nor a contract Grammar (a schema or a regex
    written as text is the harness's to compile first)."""
    if grammar is not None and not isinstance(grammar, Grammar):
        raise RequestError(f"grammar must be a compiled Grammar (torchlet.grammar compiles a "
                           f"JSON schema, a regex, a choice or an EBNF grammar) or None, got "
                           f"{_kind(grammar)}")


# The smallest temperature that samples: logits divided by less overflow float32 (a denormal
# 1e-45 made every score inf, and the race NaN). vLLM's sampling epsilon.
MIN_TEMPERATURE = 1e-5
# The largest: a step's settings are float32, where a larger one is inf (at that size every
# unfiltered token is as likely as another already).
MAX_TEMPERATURE = float(torch.finfo(torch.float32).max)


def check_sampling(params: GenerationParams) -> None:
    """Refuse sampling settings outside their ranges, naming the setting."""
    t, k, p, m, seed = params.temperature, params.top_k, params.top_p, params.min_p, params.seed
    if not _is_real(t) or not math.isfinite(t) or t < 0 or 0 < t < MIN_TEMPERATURE \
            or t > MAX_TEMPERATURE:
        raise RequestError(f"temperature must be 0 (greedy) or a number from "
                           f"{MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:.4g}, got {_kind(t)}")
    if not _is_int(k) or k < 0:
        raise RequestError(f"top_k must be an int of at least 0 (0 is off), got {_kind(k)}")
    if not _is_real(p) or not 0 < p <= 1:
        raise RequestError(f"top_p must be a number in (0, 1] (1 is off), got {_kind(p)}")
    if not _is_real(m) or not 0 <= m <= 1:
        raise RequestError(f"min_p must be a number in [0, 1] (0 is off), got {_kind(m)}")
    if seed is not None and not _is_int(seed):
        raise RequestError(f"seed must be an int or None, got {_kind(seed)}")


def layer_tensors(checkpoint: Checkpoint, i: int) -> dict[str, torch.Tensor]:
    """The tensors of decoder layer i, keyed by their names inside the layer."""
    prefix = f"model.layers.{i}."
    return {k[len(prefix):]: v for k, v in checkpoint.tensors.items() if k.startswith(prefix)}


def cast_tensors(tensors: Mapping[str, torch.Tensor], device: Any, dtype: torch.dtype) -> dict:
    return {k: v.to(device=device, dtype=dtype) for k, v in tensors.items()}


def flatten(prompts: Iterable[Sequence[int]]) -> list[int]:
    return [t for p in prompts for t in p]
