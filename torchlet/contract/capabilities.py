"""The contract's capability Protocols: what an engine of a version that declares a capability
offers (GenerateAPI ... SpeculativeAPI, API_OF, lacking), what the `layers` object offers
(Layers, SplitGQALayers) and what a sampling version exports (Sampler). Imported as
torchlet.contract."""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Protocol, runtime_checkable

import torch

from .values import (LIVE_LANES, QUANTIZED_WEIGHTS, STRUCTURED_OUTPUT, CHUNKED_PREFILL, CONTINUOUS_BATCHING, DECODE_LANES, GENERATE, GRAPH_REPLAY,
                     KV_CACHE, OVERLAP, PAGED_KV, PREFIX_CACHE, RAGGED_BATCH, REQUEST_STATES,
                     SAMPLING, SPECULATIVE, STATIC_BUFFERS, TENSOR_PARALLEL, GenerationParams, ModelConfig,
                     RequestOutput)

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
    until the step it finishes (from live_lanes, v20, it may move to a lower one); every decode pass runs the lanes, idle or not."""

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
    """What a `sampling` version exports as `draw`: the filters and the draw, one row per
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
    top_p, min_p and seed; the package exports `draw` (the Sampler protocol). A seeded
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


@runtime_checkable
class SpeculativeAPI(Protocol):
    """Capability `speculative` (v17): build(..., speculative_tokens=k, proposer="ngram",
    acceptance="exact"). With k > 0 a step may guess up to k tokens after each decoding request's
    last one (the proposer's guesses), compute them all in one pass through the paged cache, and
    keep the guesses that agree with what the engine draws itself, plus one token of its own.
    With acceptance="exact" every request's tokens are the ones k=0 gives (greedy and seeded
    alike); with "rejection" the textbook rule keeps the target's distribution, not its tokens.
    The K/V of rejected guesses is rolled back: never read, its empty blocks back in the pool,
    no sealed prefix block holding one. k=0 is the version before it."""

    def speculation_stats(self) -> dict[str, int]:
        """Since the build: "verify_passes" (passes that checked guesses), "requests" (request
        rows those passes verified), "proposed" and "accepted" (guesses), "tokens" (tokens
        those passes gave their requests: accepted guesses plus one of the engine's own each),
        "graph_passes" (those of the passes replayed from a verify graph, draws included)."""


@runtime_checkable
class QuantizedWeightsAPI(Protocol):
    """Capability `quantized_weights` (v18): build(..., weights="auto", group_size=32). A
    checkpoint may hold QuantizedTensor matrices (a GGUF file's blocks, as stored);
    weights="auto" keeps them so and the rest float, "gguf" requires them, "int8" (per output
    channel) and "int4" (groups of group_size columns, with zero points) quantize the float
    matrices at load, "float" dequantizes every matrix (the version before). Products read the
    integers as stored, so a step reads fewer bytes. Adds no method: the specs observe the
    storages a step's ops read."""


@runtime_checkable
class StructuredOutputAPI(Protocol):
    """Capability `structured_output` (v19): a request's GenerationParams.grammar (a contract
    Grammar, compiled by the harness) masks every draw of the request to the tokens the grammar
    allows after its tokens so far: its prefill's first token, each decode, and each row of a
    verifying pass (a guess the grammar refuses is never kept; the matcher is rolled back past
    the guesses it took). Where the grammar is complete the request's eos and stop ids are its
    only tokens; with none, or where the grammar allows no token at all, it finishes alone (STOP
    when complete, ERROR naming the grammar otherwise). With overlap a constrained request's
    decode is still launched ahead (v14), and its row is drawn again, masked, once the host has
    read the token its mask follows. Without a grammar a request is served as by the version
    before. Adds no method: the specs observe the tokens drawn and the logits' masks."""


@runtime_checkable
class LiveLanesAPI(Protocol):
    """Capability `live_lanes` (v20): a running request's lane may change. Before a pass feeds
    its requests' lanes (a decode step, a verifying pass), if v07's bucket for the highest lane
    in use is larger than the bucket for the number of requests holding lanes, the requests in
    the lanes at or past that number move into the free lanes below it (the lowest first), so
    the pass runs the smallest bucket that holds them; a request's K/V stays in its blocks.
    lane_of() names the lane a request holds now; a newcomer still takes the lowest free lane.
    Outputs are v19's. Adds no method: the specs observe the rows each pass feeds and stores."""


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
    SPECULATIVE: SpeculativeAPI,
    QUANTIZED_WEIGHTS: QuantizedWeightsAPI,
    STRUCTURED_OUTPUT: StructuredOutputAPI,
    LIVE_LANES: LiveLanesAPI,
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
