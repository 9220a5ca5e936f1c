"""The engine contract: the one module of plain types shared by implementations, specs and harness.

Token ids in, token ids out. A version package under `implementations/` declares

    CAPABILITIES: tuple[str, ...]   # cumulative: a version repeats what its predecessor declares
    def build(checkpoint: Checkpoint, *, device="cpu", dtype=torch.float32, **options) -> engine
    OPTIONS: tuple[BuildOption, ...]  # the **options build takes; () when it takes none
    layers                          # the `Layers` protocol: v00's model module, later a decoder
                                    # instance whose methods call each other through self
    KERNELS: dict[str, callable]    # optional: kernels a harness may time alone, by contract name
    PARTS: Recipe                   # the parts its engine is assembled from (build = PARTS.build)

Capabilities are independent. Each has its own Protocol, named `<Capability>API` (GenerateAPI,
RaggedBatchAPI, KVCacheAPI, RequestStatesAPI, ContinuousBatchingAPI, DecodeLanesAPI,
StaticBuffersAPI, GraphReplayAPI, PagedKVAPI, SamplingAPI, PrefixCacheAPI, OverlapAPI,
ChunkedPrefillAPI), that
lists only the methods the capability adds and inherits from Protocol alone; API_OF maps each
capability to its Protocol. An engine satisfies, side by side, the API of every capability its
version declares (`lacking(engine, CAPABILITIES)` names what it misses), whatever classes it is
made of. A capability that adds no method (continuous_batching, overlap, chunked_prefill) keeps its promise in its
Protocol's docstring. Layers and SplitGQALayers are what the `layers` object offers, Sampler what
a sampling version exports as `sampler`.

A version's engine is assembled from parts (`Recipe`, at the end of this module): PART_NAMES in
assembly order, each written by some version, a version's recipe being its predecessor's with
the parts its idea changes swapped (`Recipe.replace`); `Assembly` is what each part is built
from. `torchlet parts vNN` prints a version's recipe, and the docs site shows it on the
version's page.

A kernel's launcher is a torch op made with `kernel_op` (and `fake_of`, its shapes-only twin):
specs and graph recorders see one op a launch.

Specs reach engines only through these names; nothing private.
"""
from __future__ import annotations

import enum
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence, runtime_checkable

import torch

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

ALL_CAPABILITIES = (
    GENERATE, RAGGED_BATCH, SPLIT_GQA, KV_CACHE, REQUEST_STATES, CONTINUOUS_BATCHING,
    DECODE_LANES, STATIC_BUFFERS, GRAPH_REPLAY, PAGED_KV, TRITON_BASICS, TRITON_PAGED, SAMPLING,
    PREFIX_CACHE, FUSED, OVERLAP, CHUNKED_PREFILL, TENSOR_PARALLEL,
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
    needs float64 to be held exactly (float32 rounds it from 2^23 up, the all-ones hash to 1)."""

    max_new_tokens: int = 16
    eos_token_ids: tuple[int, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    temperature: float = 0.0    # 0: greedy
    top_k: int = 0              # 0: off
    top_p: float = 1.0          # 1: off
    min_p: float = 0.0          # 0: off
    seed: int | None = None     # None: a fresh seed per request

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


@dataclass
class RequestOutput:
    """A request as the step-wise API reports it (request_states and later). error is set for
    finish_reason ERROR alone: the exception that ended it, as "TypeError: message"."""

    request_id: int
    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
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
                  sampling: bool = False) -> list[int]:
    """Refuse, with a message that names the problem, a request no engine can serve, or one
    that samples when the engine cannot (sampling=False). Returns the prompt as a list of
    Python ints (numpy integers are integers too; bool is not)."""
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


# What each capability promises, one Protocol per capability. Each lists only the methods its
# capability adds and inherits from Protocol alone: an engine satisfies side by side the APIs of
# the capabilities its version declares (API_OF, lacking), so the contract fixes no subclass
# chain on the implementations. A capability with no method (continuous_batching, overlap) keeps
# its promise in its Protocol's docstring; one whose promise is not on the engine (split_gqa: the
# `layers` object; triton_basics, triton_paged and fused: kernels) has no API here.

@runtime_checkable
class GenerateAPI(Protocol):
    """Capability `generate` (v00): every engine has these."""

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


@runtime_checkable
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



@runtime_checkable
class RaggedBatchAPI(Protocol):
    """Capability `ragged_batch` (v01_0). A ragged batch is the requests' tokens end to end in one
    buffer, described by `req_indptr`: int32 prefix sums of the lengths, length B + 1, starting at
    0 (FlashInfer's `qo_indptr`); request i owns rows req_indptr[i]:req_indptr[i + 1]. The
    `layers` module adds `req_indptr(lengths) -> Tensor` and takes an optional trailing
    `req_indptr` in `attention` and `decoder_layer`."""

    def forward_ragged(self, token_ids: list[int], req_indptr: torch.Tensor) -> torch.Tensor:
        """Float logits [len(token_ids), vocab] of every row; positions restart at 0 in each
        request. Raises RequestError for a req_indptr that does not describe the batch."""
        ...


@runtime_checkable
class SplitGQALayers(Layers, Protocol):
    """Capability `split_gqa` (v01_1): what the `layers` object adds (the engine adds nothing):
    attention's phases, in the order `attention` runs them. Shapes: T rows, H query heads, KV
    heads, G = H // KV."""

    def project_qkv(self, x: torch.Tensor, w: Mapping[str, torch.Tensor]
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [T, H*D], k and v [T, KV*D]."""
        ...

    def split_heads(self, t: torch.Tensor, num_heads: int) -> torch.Tensor:
        """[T, heads*D] -> [T, heads, D]."""
        ...

    def qk_norm(self, q: torch.Tensor, k: torch.Tensor, w: Mapping[str, torch.Tensor],
                config: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
        """q [T, H, D] and k [T, KV, D], each head RMS-normed by q_norm / k_norm where
        config.qk_norm (Qwen3), before rope_qk; as they are otherwise."""
        ...

    def rope_qk(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, theta: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """q [T, H, D] and k [T, KV, D], each row rotated at its position (apply_rope)."""
        ...

    def group_queries(self, q: torch.Tensor, num_kv_heads: int) -> torch.Tensor:
        """[T, H, D] -> [T, KV, G, D]: query head h = kv * G + g reads KV head kv."""
        ...

    def attend_per_request(self, qg: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           req_indptr: torch.Tensor) -> torch.Tensor:
        """Causal attention of each request over its own rows: -> [T, KV, G, D]."""
        ...

    def output_projection(self, out: torch.Tensor, w: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """[T, KV, G, D] -> merge heads -> o_proj -> [T, hidden]."""
        ...


@runtime_checkable
class KVCacheAPI(Protocol):
    """Capability `kv_cache` (v02): prefill and decode driven directly, by caller-chosen request
    ids (hashable). Don't reuse an id still cached, nor mix these ids with those add_request
    (RequestStatesAPI) hands out."""

    def prefill(self, request_ids: list, prompts: list[list[int]]) -> torch.Tensor:
        """One pass over whole prompts; fills each request's cache. Float logits [B, vocab] of
        each prompt's last token."""
        ...

    def decode(self, request_ids: list, sequences: list[list[int]]) -> torch.Tensor:
        """One pass feeding each request only the last token of its sequence (the request's whole
        token list so far), at position len - 1, over what it has cached; appends that token's
        K/V. Float logits [B, vocab]. RequestError unless exactly len - 1 tokens are cached."""
        ...

    def cached_kv(self, request_id) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """A copy of the request's cache: per layer (k, v), each [tokens, KV, D], k after RoPE."""
        ...

    def num_cached_tokens(self, request_id) -> int:
        """Tokens the request holds in the cache; 0 once released or never prefilled."""
        ...

    def release(self, request_id) -> None:
        """Free the request's cache."""
        ...

    def total_cached_tokens(self) -> int:
        """Tokens held in the cache by all requests together."""
        ...


@runtime_checkable
class RequestStatesAPI(Protocol):
    """Capability `request_states` (v03): the step-wise API. A request moves WAITING -> RUNNING ->
    FINISHED (or WAITING -> FINISHED when aborted, or when its first token already ends it); a
    finished request's output never changes. generate and stream drive these same methods.

    A request fails alone. Its settings are checked when it is added, so a malformed one is
    never queued; if its own work still raises inside a step (taking its token: a stop check
    of a GenerationParams subclass, say), that request is finished with FinishReason.ERROR and
    RequestOutput.error naming the exception, keeps the tokens it was given (the one being
    taken included), and frees what it held (cache, lane, blocks) in that step, as any finished
    request does. The step returns normally; the other requests and later steps go on as if it
    had never been added. generate and stream of such a request raise RequestError naming the
    cause (stream after yielding its tokens), chained to the exception."""

    def add_request(self, prompt: list[int], params: GenerationParams) -> int:
        """Queue a request (WAITING); check_request's errors are raised here, and then nothing
        is queued. Returns its id."""
        ...

    def step(self) -> list[RequestOutput]:
        """Run one forward pass for what the scheduler picks; return a copy of the output of
        every request it touched (admitted, given a token, or finished, failed included)."""
        ...

    def output(self, request_id: int) -> RequestOutput:
        """A copy of the request's output now."""
        ...

    def take(self, request_id: int) -> RequestOutput:
        """output(), and where the request has finished (its tokens, an abort or an error), it
        leaves the engine: its id is unknown from then on (RequestError). What a long-running
        caller (torchlet serve) reads a finished request with, so the engine holds only the
        requests still to be taken; output() leaves them there for the reads a caller repeats."""
        ...

    def abort(self, request_id: int) -> None:
        """Finish a waiting or running request (reason ABORTED) and free what it held; no effect
        on a finished one. RequestError for an unknown id."""
        ...

    def has_unfinished(self) -> bool: ...

    def last_step_stats(self) -> Any:
        """What the latest step ran (None before the first): fields step (1, 2, ...),
        prefill_ids, decode_ids, waiting_ids (FCFS order, after admission), finished_ids,
        num_prefill_tokens, num_decode_tokens, num_tokens, num_running."""
        ...


@runtime_checkable
class ContinuousBatchingAPI(Protocol):
    """Capability `continuous_batching` (v04): build(ckpt, max_running=..., max_step_tokens=...).
    Waiting requests join the running batch at any step when capacity allows; finished requests
    leave at the step they finish. It adds no method: the step-wise API's last_step_stats()
    (RequestStatesAPI) must then respect num_running <= max_running and num_tokens <=
    max_step_tokens at every step, and add_request refuses a prompt longer than
    max_step_tokens (until chunked_prefill, which computes such a prompt in slices)."""


@runtime_checkable
class DecodeLanesAPI(Protocol):
    """Capability `decode_lanes` (v05): build(ckpt, max_lanes=N, poison_inactive_lanes=False,
    max_model_len=None). A request takes the lowest free lane when it is prefilled and keeps it
    until the step it finishes; every decode pass runs the lanes, idle or not."""

    num_lanes: int

    def lane_of(self, request_id) -> int | None:
        """The request's lane while it runs; None while it waits and once it has finished."""
        ...


@runtime_checkable
class StaticBuffersAPI(Protocol):
    """Capability `static_buffers` (v06): the decode step reads inputs allocated once."""

    def decode_buffers(self) -> dict[str, torch.Tensor]:
        """The decode step's input tensors by name (at least "token_ids" and "positions"): the
        same objects, addresses, shapes and dtypes at every step."""
        ...


@runtime_checkable
class GraphReplayAPI(Protocol):
    """Capability `graph_replay` (v07): build(..., use_graphs=True). The decode step is captured
    once per bucket of lanes and replayed; use_graphs=False runs the same step eagerly."""

    def graph_stats(self) -> dict[int, dict[str, int]]:
        """bucket -> {"captures": n, "replays": n}."""
        ...


@runtime_checkable
class PagedKVAPI(Protocol):
    """Capability `paged_kv` (v08): build(..., num_blocks=None, block_size=16,
    poison_free_blocks=False). K/V lives in a pool of blocks (block 0 is the null block); each
    request reads it through its block table. When the pool runs out, the request admitted last
    is preempted and recomputed later. poison_free_blocks fills every block no request holds
    with NaN (at build and whenever a block is freed), so a read of one shows in the logits.
    decode_buffers() (StaticBuffersAPI) adds "block_tables", "context_lens" and "slot_mapping":
    the tensors the decode step reads."""

    num_preemptions: int

    def block_tables(self) -> dict:
        """request id -> its table of physical block ids, for every request holding blocks."""
        ...

    def paged_metadata(self) -> Any:
        """kv_indptr, kv_indices, kv_last_page_len, block_tables, context_lens of the requests
        holding blocks, in block_tables() order (FlashInfer's names)."""
        ...

    def pool_stats(self) -> dict[str, int]:
        """block_size, num_blocks, num_usable, num_free, num_used."""
        ...

    def kv_bytes(self, request_id) -> int:
        """K/V bytes the request holds: its blocks, no more."""
        ...


@runtime_checkable
class Sampler(Protocol):
    """What a `sampling` version exports as `sampler`: the filters and the draw, one row per
    request, every argument a tensor with one entry per row. Off values (top_k 0, top_p 1,
    min_p 0) leave a row unfiltered; temperature 0 makes sample() return the row's argmax."""

    def filter_logits(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                      top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
        """logits [B, vocab] divided by the temperature, then top-k, top-p and min-p applied in
        that order (Hugging Face's warpers'); a filtered token's logit is -inf."""
        ...

    def sample(self, logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
               top_p: torch.Tensor, min_p: torch.Tensor, seed: torch.Tensor,
               position: torch.Tensor) -> torch.Tensor:
        """One token id per row [B], drawn from the filtered distribution with random numbers
        that depend on (seed, position) only: position is the index the drawn token will have
        in its request (prompt included)."""
        ...


@runtime_checkable
class SamplingAPI(Protocol):
    """Capability `sampling` (v11): requests may set GenerationParams' temperature, top_k,
    top_p, min_p and seed; the package exports `sampler` (the Sampler protocol). A seeded
    request's tokens depend on nothing but its prompt, its params and the model: not on the
    batch, its lane, its arrival or a preemption. The captured decode step draws the lanes'
    tokens on the device; a step whose lanes are all greedy may take the argmax alone."""

    def sampling_buffers(self) -> dict[str, torch.Tensor]:
        """"temperature", "top_k", "top_p", "min_p", "seed": each lane's settings, in the static
        tensors a sampling decode step reads besides decode_buffers() (StaticBuffersAPI)."""
        ...


@runtime_checkable
class PrefixCacheAPI(Protocol):
    """Capability `prefix_cache` (v12): build(..., prefix_cache=True, block_hash=None). A
    request's leading full blocks that another request computed (same tokens from position 0,
    compared, not only hashed) are shared by reference count instead of computed; at least a
    prompt's last token is always computed. Blocks no request holds stay cached until a new
    block is needed, least recently freed first: cached_blocks() names them, in that order.
    prefix_cache=False gives v11's engine."""

    def prefix_cache_stats(self) -> dict[str, int]:
        """queried_tokens (prompt tokens looked up), hit_tokens (of them, found cached and not
        computed) and evictions (cached blocks taken for other tokens), since build."""
        ...

    def cached_blocks(self) -> list[int]:
        """The blocks no request holds that keep their K/V for a later prompt with the same
        prefix, the next to be evicted first. pool_stats() counts them as free; a hit takes
        one off this list for as long as a block table holds it. [] with prefix_cache=False."""
        ...


@runtime_checkable
class OverlapAPI(Protocol):
    """Capability `overlap` (v14): build(..., overlap=True). step() launches the next step's
    decode for every running request that may continue (all but those whose next token is its
    last) before it reads its own tokens back; the decode ahead takes each lane's token id on the
    device. Outputs are v13's. Between steps a running request has cached all its tokens, its
    last one included (num_cached_tokens counts one more than v13's), unless the pool lacked the
    blocks for a step ahead, which the next step then runs in order. A request that stops at a
    stop token, or is aborted, has had one row computed ahead that nothing reads; its blocks are
    freed as before. overlap=False runs v13's step. It adds no method."""


@runtime_checkable
class ChunkedPrefillAPI(Protocol):
    """Capability `chunked_prefill` (v15): build(..., max_step_tokens=budget). A step computes at
    most `budget` rows: every running request past its prompt decodes its one row first, and the
    rest of the budget goes to the next slices of prompts, oldest first (the running ones', then
    those admitted now). A request samples its first token only after its prompt's last slice;
    rows the prefix cache holds count as computed. A prompt longer than the budget is computed in
    slices, not refused; a request preempted mid-prompt gives its blocks back and starts its
    prompt again. last_step_stats().num_prefill_tokens counts the rows the step's slices
    computed, and prefill_ids the requests that computed a slice. It adds no method."""


@runtime_checkable
class TensorParallelAPI(Protocol):
    """Capability `tensor_parallel` (v16): built on every rank of a torch.distributed process
    group (gloo on CPUs, NCCL on GPUs; the harness starts it, torchlet.parallel), the engine holds
    its rank's shard of the model and of the K/V pool. Rank 0's engine is the one a caller
    drives, through every other capability's API; each of its steps sends the others that step's
    plan, and the other ranks' engines serve it in follow() until rank 0's close(). Outside a
    process group, or in a group of one, it is the version before it. A rank that stops makes
    the others' next call fail with a TorchletError, not hang."""

    rank: int
    world_size: int

    def follow(self) -> None:
        """On a rank other than 0: run rank 0's plans until rank 0 closes; returns then."""

    def close(self) -> None:
        """On rank 0: tell the other ranks to stop following (their follow() returns). Once
        closed, the engine takes no more work. Closing twice does nothing."""

    def shards(self) -> list[dict]:
        """On rank 0: what each rank's engine holds, in rank order, gathered from the ranks:
        "heads", "kv_heads", "intermediate" and "vocab" as [start, stop) of the full model's,
        and "weights" and "kv" in bytes (a report; the specs observe the shards themselves)."""


# Capability -> the Protocol its engines satisfy. Capabilities missing here promise nothing an
# engine exposes (see above).
API_OF: dict[str, type] = {
    GENERATE: GenerateAPI,
    RAGGED_BATCH: RaggedBatchAPI,
    KV_CACHE: KVCacheAPI,
    REQUEST_STATES: RequestStatesAPI,
    CONTINUOUS_BATCHING: ContinuousBatchingAPI,
    DECODE_LANES: DecodeLanesAPI,
    STATIC_BUFFERS: StaticBuffersAPI,
    GRAPH_REPLAY: GraphReplayAPI,
    PAGED_KV: PagedKVAPI,
    SAMPLING: SamplingAPI,
    PREFIX_CACHE: PrefixCacheAPI,
    OVERLAP: OverlapAPI,
    CHUNKED_PREFILL: ChunkedPrefillAPI,
    TENSOR_PARALLEL: TensorParallelAPI,
}


def missing_members(engine: Any, capability: str) -> list[str]:
    """The methods and attributes the capability's API names that the engine lacks, in the order
    members(API) lists them ([] for a capability without an API)."""
    api = API_OF.get(capability)
    if api is None:
        return []
    return [name for name in members(api) if not hasattr(engine, name)]


def members(api: type) -> list[str]:
    """The attributes an API declares (annotated), then its methods: its own, as each API
    inherits from Protocol alone."""
    own = vars(api)
    return [*own.get("__annotations__", {}),
            *(name for name, value in own.items() if callable(value) and not name.startswith("_"))]


def lacking(engine: Any, capabilities: Iterable[str]) -> dict[str, list[str]]:
    """capability -> the members its API names that the engine lacks, for each of `capabilities`
    (a version's CAPABILITIES) the engine does not satisfy; {} when it satisfies them all."""
    found = {c: missing_members(engine, c) for c in capabilities}
    return {c: names for c, names in found.items() if names}


# Build options and kernels: what a harness may ask of a version by contract name, so that it
# never guesses option names from a build's signature or imports a module by its file name.

# Roles a build option can play. A harness that sizes an engine to its work asks which option
# has the role; a version has at most one option per role.
MAX_RUNNING = "max_running"             # requests running at once (v04's limit, v05's lanes)
MAX_STEP_TOKENS = "max_step_tokens"     # rows one step may feed
MAX_LEN = "max_len"                     # the longest sequence (prompt + output) it must hold
NUM_BLOCKS = "num_blocks"               # K/V blocks in the pool, the null block included
BLOCK_SIZE = "block_size"               # tokens per K/V block
ROLES = (MAX_RUNNING, MAX_STEP_TOKENS, MAX_LEN, NUM_BLOCKS, BLOCK_SIZE)


@dataclass(frozen=True)
class BuildOption:
    """One keyword build takes besides device and dtype: its name, the type of a value, what
    build does without it (None: derived, as doc says), if the harness may size it, its role,
    and for an int the least value it takes. A build refuses, with TypeError, an option its
    OPTIONS don't name; check_build refuses a declared one's value of another type (bool is not
    an int) or below its minimum, and None unless the default is None."""

    name: str
    type: type
    default: Any
    doc: str
    role: str | None = None
    minimum: int | None = None

    def refusal(self, value: Any) -> str | None:
        """Why value is no value of this option, or None when it is one."""
        if value is None and self.default is None:
            return None
        if self.type is int:
            ok = _is_int(value) and (self.minimum is None or value >= self.minimum)
            expected = "an int" + ("" if self.minimum is None else f" of at least {self.minimum}")
        elif self.type is bool:
            ok, expected = isinstance(value, bool), "True or False"
        else:
            ok, expected = isinstance(value, self.type), f"a {self.type.__name__}"
        if ok:
            return None
        return (f"{self.name} must be {'None or ' if self.default is None else ''}{expected}, "
                f"got {_kind(value)}")


def check_device(device: Any) -> torch.device:
    """The torch device a build is asked for, or a TorchletError saying why there is none here
    (torch itself answers a CUDA device on a machine without one with a bare AssertionError)."""
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError):
        raise TorchletError(f"device={device!r} is not a device torch knows "
                            f"(cpu, cuda, cuda:1, ...)") from None
    if found.type == "cuda":
        if not torch.cuda.is_available():
            raise TorchletError(f"device={device!r}: this machine has no CUDA GPU that torch can "
                                f"use (torch.cuda.is_available() is False); build with "
                                f"device='cpu'")
        if found.index is not None and found.index >= torch.cuda.device_count():
            raise TorchletError(f"device={device!r}: this machine has "
                                f"{torch.cuda.device_count()} CUDA GPU(s), numbered from 0")
    return found


def check_build(version: str, declared: Sequence[BuildOption], options: Mapping[str, Any]
                ) -> None:
    """Refuse what a build of `version` is given before anything is built, each in one line
    naming what it refuses: a device this machine lacks, a dtype that is no floating torch
    dtype, a declared option's value (BuildOption.refusal). An option nobody declares is left
    to the build, whose refusal names the ones it takes."""
    if "device" in options:
        check_device(options["device"])
    dtype = options.get("dtype", torch.float32)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise BuildError(f"{version}: dtype must be a floating torch dtype (torch.float32, "
                         f"torch.bfloat16, ...), got {_kind(dtype)}")
    for option in declared:
        why = option.refusal(options[option.name]) if option.name in options else None
        if why is not None:
            raise BuildError(f"{version}: {why}")


# Kernels a version may declare in KERNELS, by name, with the signature each must have.
# paged_decode_attention(q [B, heads, D], k_cache, v_cache [blocks, block_size, KV heads, D],
#     block_tables [B, max_blocks] int32 (padded with the null block 0), context_lens [B] int32,
#     scale) -> [B, heads, D]: one new token per request over the first context_lens[b] tokens.
PAGED_DECODE_ATTENTION = "paged_decode_attention"



# Recipes: a version's engine as named parts, and the one assembly that builds it.

# The parts an engine is made of, in the order the assembly builds them: a part may use any
# part built before it. A recipe names the parts its version has (v00 only a model and a loop).
PART_NAMES = ("model", "kv", "sampler", "inputs", "runner", "request", "policy", "scheduler",
              "loop")


class Served:
    """An engine member that one of its parts serves: `lane_of = Served("kv")` on the engine's
    class reads the engine's kv's lane_of at each access (one Served per name). A part names what it serves in its
    `SERVES`; where the engine's part serves no such member (an earlier version's kv) the
    engine has none either (AttributeError, so hasattr and the capability Protocols say so).
    `part` is the attribute path from the engine: "kv", "scheduler", "runner.inputs"."""

    def __init__(self, part: str):
        self.part = part

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, engine: Any, owner: type | None = None) -> Any:
        if engine is None:
            return self
        part = engine
        for name in self.part.split("."):
            part = getattr(part, name)
        if self.name not in getattr(part, "SERVES", ()):
            raise AttributeError(f"{type(engine).__name__!r} object has no attribute "
                                 f"{self.name!r}: its {self.part} does not serve it")
        return getattr(part, self.name)


class Assembly:
    """What the parts of one engine are built from: the checkpoint and its config, the device
    and dtype, the value of every option the recipe's parts declare (given, or the default), and
    each part built so far, as an attribute by its name (`a.kv`, `a.runner`). A part may narrow
    the checkpoint and config that the parts after it see (v16's model: its rank's shard)."""

    def __init__(self, checkpoint: Checkpoint, device: Any, dtype: torch.dtype,
                 options: Mapping[str, Any]):
        self.checkpoint, self.config = checkpoint, checkpoint.config
        self.device, self.dtype = torch.device(device), dtype
        self.options = dict(options)


@dataclass(frozen=True)
class Recipe:
    """A version's engine as data: part name -> part, and the version that wrote each. A part is
    a class or an object; one with an `assemble(assembly)` (a classmethod of a class) is built by
    it, any other is used as it is (a decoder instance, the request class). A part's `OPTIONS`
    are build options of every engine it is in."""

    version: str
    parts: Mapping[str, Any]
    writers: Mapping[str, str]

    @classmethod
    def first(cls, version: str, **parts: Any) -> "Recipe":
        """A recipe whose parts `version` writes all of."""
        return cls(version, _ordered(parts), {name: version for name in parts})

    def replace(self, version: str, **swaps: Any) -> "Recipe":
        """`version`'s recipe: this one's parts, with `swaps` written by `version`."""
        unknown = sorted(set(swaps) - set(PART_NAMES))
        if unknown:
            raise ValueError(f"{version}: no part named {unknown}; parts are {PART_NAMES}")
        writers = {**self.writers, **{name: version for name in swaps}}
        return Recipe(version, _ordered({**self.parts, **swaps}), _ordered(writers))

    def writer(self, name: str) -> str | None:
        """The version that wrote the part (None: the recipe has no such part)."""
        return self.writers.get(name)

    def swapped(self) -> tuple[str, ...]:
        """The parts this recipe's own version wrote."""
        return tuple(n for n, w in self.writers.items() if w == self.version)

    def table(self) -> list[tuple[str, str, str]]:
        """(part, what it is, the version that wrote it), in assembly order."""
        return [(name, _label(part), self.writers[name]) for name, part in self.parts.items()]

    @property
    def options(self) -> tuple[BuildOption, ...]:
        """The options build takes besides device and dtype: each part's OPTIONS, in assembly
        order (a name two parts declare is the first one's)."""
        found: dict[str, BuildOption] = {}
        for part in self.parts.values():
            for option in getattr(part, "OPTIONS", ()):
                found.setdefault(option.name, option)
        return tuple(found.values())

    def build(self, checkpoint: Checkpoint, *, device: Any = "cpu", dtype: torch.dtype = torch.float32,
              **options: Any) -> Any:
        """The engine: every part built in assembly order, the loop last. TypeError naming the
        options build takes when given another."""
        declared = self.options
        names = [o.name for o in declared]
        unknown = sorted(set(options) - set(names))
        if unknown:
            takes = ("no options" if not names else names[0] if len(names) == 1
                     else f"{', '.join(names[:-1])} and {names[-1]}")
            raise TypeError(f"{self.version} takes {takes}, got {unknown}")
        values = {o.name: o.default for o in declared}
        assembly = Assembly(checkpoint, device, dtype, {**values, **options})
        for name, part in self.parts.items():
            assemble = getattr(part, "assemble", None)
            setattr(assembly, name, part if assemble is None else assemble(assembly))
        return assembly.loop


def _ordered(parts: Mapping[str, Any]) -> dict[str, Any]:
    return {name: parts[name] for name in PART_NAMES if name in parts}


def _label(part: Any) -> str:
    """A part as a reader looks it up: a class or function by name, an object by its class, a
    module by its name."""
    if isinstance(part, type) or callable(part) and hasattr(part, "__qualname__"):
        return part.__qualname__
    if hasattr(part, "__spec__") and hasattr(part, "__name__"):
        return part.__name__.rsplit(".", 1)[-1]
    if type(part).__repr__ is not object.__repr__:  # an object that says what it is made of
        return repr(part)
    return f"{type(part).__qualname__} instance"


# --- kernels as ops ------------------------------------------------------------------------
# A version's kernel launcher is a torch op, so that specs (a dispatch mode) and graph recorders
# see one op a launch and not the launch's insides (PITFALLS.md). Registered here, once, rather
# than in the version that first writes a kernel: a learner's stub of it would fail the import.

_LIBRARIES: dict[str, torch.library.Library] = {}  # kept alive: a dropped one unregisters its ops


def kernel_op(qualname: str, mutates_args: tuple[str, ...] = ()):
    """Decorator: the function becomes the torch op `qualname` (its schema read from its type
    hints, as torch.library.custom_op reads it) and the op is returned. A dispatch mode or graph
    recorder sees one op, not the kernel launch inside it. Unlike custom_op, a call reaches the
    function straight from the dispatcher: custom_op's Python layers (dynamo's guard, an aliasing
    check) cost about 50 us a call, and an eager prefill makes about 150 such calls a step."""
    namespace, name = qualname.split("::")
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    lib = _LIBRARIES[namespace]

    def define(fn):
        lib.define(name + torch.library.infer_schema(fn, mutates_args=mutates_args))
        lib.impl(name, fn, "CompositeExplicitAutograd")
        return getattr(getattr(torch.ops, namespace), name).default
    return define


def fake_of(op):
    """Decorator: the op's shapes-only twin, for tracing without running a kernel."""
    def register(fn):
        torch.library.register_fake(op, fn, lib=_LIBRARIES[op.namespace])
        return fn
    return register
