"""The parts' seams: what one part of an engine may ask of another. Open this first.

An engine is assembled from parts (recipe.py: PART_NAMES, Recipe). Each part has a Protocol here
that lists the few members its callers use, one line each on what it promises; a caller uses
nothing else of it (spec/test_part_protocols.py checks both sides: every version's assembled part
has its Protocol's members with the same parameter names, and no code in implementations/ reaches
a member of another part that its Protocol leaves out). A caller that needs more asks the part a
question (`kv.blocks_needed(n)`); it does not reach into the part's fields (`kv.pool`).

A later version's part that offers more has a derived Protocol (PagedKVPart(LanesKVPart)), not
one fat interface: PROTOCOLS says, per part, the version that first needs each, and the Protocol
a version's part must satisfy is the last one whose version is not after it. Where a later
version's part answers the same question over other arguments (v02's runner prefills request
ids, v03's prefills requests), the two Protocols are siblings over a common base.

A Protocol's member whose annotation is another Protocol here (ModelPart's `memory`, `ops`) is an
object inside the part that callers may reach, but only for that Protocol's members: the model is
a decoder composing its ops and its memory (v08), and a runner calls a pass a later memory adds
on the memory itself.

The loop calls that run a pass are named by COMPUTING below: v16's engine sends its plan to the
other ranks at each of them, and derives its list from this one.
"""
from __future__ import annotations

import re
from typing import Any, Hashable, Protocol, Sequence

import torch

from .values import GenerationParams, ModelConfig, RequestOutput, RequestState

# --- request: a record with a lifecycle (v03) --------------------------------------------------


class RequestPart(Protocol):
    """v03: one request, its state on itself. The request part is the class; callers make one
    with `request(id, prompt, params)` and read and drive it through these."""

    id: int                       # the engine's id of it
    prompt: list[int]             # the prompt as given (never changed)
    params: GenerationParams      # its settings, as the sampler prepared them
    tokens: list[int]             # the tokens it has been given so far
    sequence: list[int]           # prompt then tokens, one list: read it, never change it
    computed: int                 # tokens of its sequence whose K/V it holds (the runner counts)
    state: RequestState           # WAITING, RUNNING or FINISHED (the scheduler moves it)
    finished: bool                # whether it is FINISHED

    def append(self, token: int) -> None:
        """Take a new token; finish on a stop, eos or the last one allowed."""

    def finish(self, reason) -> None:
        """Finish for this reason."""

    def fail(self, error: Exception) -> None:
        """Finish with ERROR: its own work raised, and it alone ends."""

    def raise_if_failed(self) -> None:
        """RequestError naming the cause if a step failed it."""

    def output(self) -> RequestOutput:
        """A copy of what it has produced, that never changes under the caller."""


class LaneRequestPart(RequestPart, Protocol):
    """v05: a request holds a decode lane while it runs."""

    lane: int | None              # its decode lane, set by the K/V memory; None when it holds none


class ChunkedRequestPart(LaneRequestPart, Protocol):
    """v15: a request's prompt is computed a slice at a time."""

    prefill_to: int               # the length its K/V must reach before it samples
    prefilling: bool              # whether rows of its admitted sequence are still to compute


class SpeculativeRequestPart(ChunkedRequestPart, Protocol):
    """v17: a request may hold guesses at the end of its sequence for one pass, and take
    several tokens a step."""

    guessed: int                  # guesses at the end of its sequence (not tokens): 0 between steps

    def guess(self, tokens: Sequence[int]) -> None:
        """Hold these guesses at the end of its sequence while a pass verifies them."""

    def settle(self) -> None:
        """Drop its guesses from its sequence."""

    def extend(self, tokens: Sequence[int]) -> None:
        """append() each token in turn, stopping once it finishes."""


# --- model: the decoder the runner's passes run (v00: a module of functions) -------------------


class RaggedModelPart(Protocol):
    """v01_0: the decoder, stateless; its weights are the caller's."""

    Weights: Any                  # Weights.from_checkpoint(checkpoint, device, dtype): its tensors

    def req_indptr(self, lengths, device=None) -> torch.Tensor:
        """The ragged batch's row offsets for requests of these lengths."""

    def last_rows(self, indptr: torch.Tensor) -> torch.Tensor:
        """Each request's last row in a ragged batch."""

    def lm_head(self, weights, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of these hidden rows."""

    def forward_ragged(self, weights, token_ids: torch.Tensor,
                       req_indptr: torch.Tensor) -> torch.Tensor:
        """Hidden states of every row of a ragged batch, no cache."""


class CachedModelPart(RaggedModelPart, Protocol):
    """v02: a pass over new rows after each request's cached K/V."""

    def forward_cached(self, weights, token_ids: torch.Tensor, req_indptr: torch.Tensor,
                       kv) -> torch.Tensor:
        """Hidden states of the new rows; each request's K/V grows by them."""


class LaneModelPart(CachedModelPart, Protocol):
    """v05: a prefill pass into placed memory and a fixed-shape decode pass over lanes."""

    def forward_prefill(self, weights, token_ids: torch.Tensor, indptr: torch.Tensor, *memory
                        ) -> torch.Tensor:
        """Whole sequences, ragged, their K/V stored where the memory's destinations say."""

    def forward_decode(self, weights, *inputs) -> torch.Tensor:
        """One decode step over every lane, the inputs' buffers then the K/V tensors."""


class KernelOps(Protocol):
    """v09: what a runner and a sampler may ask of the model's ops."""

    on_triton: bool               # whether the layers run their kernels (else the PyTorch path)

    def argmax(self, logits: torch.Tensor) -> torch.Tensor:
        """Each row's index of its largest logit: what a sampler's greedy draw asks."""


class KernelModelPart(LaneModelPart, Protocol):
    """v09: the model's ops say whether kernels run (v15's slice graphs need them)."""

    ops: KernelOps


class PrefixMemory(Protocol):
    """v12: the pass the prefix cache's memory adds, called on the memory (v08's decoder names
    only the passes every memory has)."""

    def forward_prefill_cached(self, weights, token_ids: torch.Tensor, positions: torch.Tensor,
                               indptr: torch.Tensor, slot_mapping: torch.Tensor, context, kv
                               ) -> torch.Tensor:
        """Rows after each request's cached prefix, attending over its whole context."""


class PrefixModelPart(KernelModelPart, Protocol):
    """v12: the model's memory computes only a request's uncached rows."""

    memory: PrefixMemory


class ShardedModelPart(PrefixModelPart, Protocol):
    """v16: the model is one rank's shard of the whole."""

    shard: Any                    # the rank's Shard: rank, world and its ranges of the model


# --- kv: the K/V memory ------------------------------------------------------------------------


class KVPart(Protocol):
    """v02: what every K/V memory answers, by request id."""

    def check(self, prompt: list[int], params: GenerationParams) -> None:
        """RequestError if this memory could never hold the request."""

    def free(self, request_id: Hashable) -> None:
        """The request gives back whatever it holds (nothing held: nothing happens)."""

    def num_tokens(self, request_id: Hashable) -> int:
        """Tokens whose K/V the request holds."""

    def total_tokens(self) -> int:
        """Tokens held over every request."""

    def kv_of(self, request_id: Hashable) -> list:
        """A copy of the request's K/V: per layer (k, v) [tokens, KV, D]."""


class GrowingKVPart(KVPart, Protocol):
    """v02-v04: per-request caches that grow by concatenation."""

    def allocate(self, request_id: Hashable) -> list:
        """An empty cache for the request (RequestError if it has one)."""

    def layers_of(self, request_id: Hashable) -> list:
        """The request's cache, per layer, for a pass to extend."""

    def __contains__(self, request_id: Hashable) -> bool:
        """Whether the request has a cache."""


class LanesKVPart(KVPart, Protocol):
    """v05: memory behind decode lanes, placed when a request is prefilled."""

    num_lanes: int                # decode lanes: the requests running at once
    max_len: int                  # the rows (prompt + output) a request may hold
    kv: list                      # per layer (k, v): the tensors every pass reads and writes

    def place(self, requests: Sequence) -> None:
        """Each request takes a lane (and from v08 its blocks); none unless all fit."""

    def destinations(self, requests: Sequence):
        """Where a prefill of these placed requests stores their rows."""

    def lanes_in_use(self) -> list[int]:
        """The lanes held now."""

    def lane_of(self, request_id: Hashable) -> int | None:
        """The request's lane, None when it holds none."""

    def num_free(self) -> int:
        """Lanes nobody holds."""


class PagedKVPart(LanesKVPart, Protocol):
    """v08: the memory in blocks; the pool's block table is the one record of which blocks a
    request holds (a reader asks for it, nothing else keeps a copy)."""

    block_size: int               # tokens per block

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold num_tokens tokens."""

    def check_alone(self, request) -> None:
        """RequestError if the request could never finish even alone in an empty pool."""

    def can_preempt(self) -> bool:
        """Whether the pool is too small for every lane's longest sequence: running requests may
        have to give their blocks back."""

    def num_free_blocks(self) -> int:
        """Blocks free now."""

    def blocks_for_decode(self, requests: Sequence) -> int:
        """New blocks a decode step of these requests takes."""

    def free_after_decode(self, requests: Sequence) -> int:
        """Free blocks left once a decode step of these requests took its own (below 0: short)."""

    def check_room(self, requests: Sequence) -> None:
        """RequestError unless lanes and blocks are free for all of these requests now."""

    def grow(self, requests: Sequence) -> None:
        """Each request takes the room of the token its decode step feeds."""

    def block_table(self, request_id: Hashable) -> Sequence[int]:
        """The request's block table itself (it grows with the request): look, do not keep."""

    def slot(self, request_id: Hashable, position: int) -> int:
        """The flat cache slot of the request's token at this position."""

    def slots(self, request_id: Hashable, start: int, count: int) -> list[int]:
        """slot() of count positions from start."""


class PrefixKVPart(PagedKVPart, Protocol):
    """v12: full blocks shared between requests with the same prompt prefix."""

    enabled: bool                 # whether it shares prefixes (False: v11's memory, unchanged)

    def place_cached(self, requests: Sequence) -> None:
        """place(), sharing each request's cached prefix: request.computed is then its hit."""

    def seal(self, request) -> None:
        """Register the request's full blocks for later requests to find."""

    def seal_filled(self, requests: Sequence) -> None:
        """Seal the block each request's last token filled, if it filled one."""


class SpeculativeKVPart(PrefixKVPart, Protocol):
    """v17: a request's K/V grows by several rows a pass and rolls back to the rows it keeps."""

    def extend(self, request, count: int) -> int:
        """Room for up to count more rows of the request, as far as free blocks go: how many."""

    def roll_back(self, request, keep: int) -> None:
        """Keep the request's first `keep` rows: the rest are never read again, blocks that hold
        none of the kept go back to the pool, full kept blocks are sealed."""


# --- sampler -----------------------------------------------------------------------------------


class SamplerPart(Protocol):
    """v03: a step's logits to its tokens."""

    samples: bool                 # whether it draws at random (else check_request refuses it)
    constrains: bool              # whether it applies a request's grammar (else check_request
                                  # refuses one)

    def prepare(self, params: GenerationParams) -> GenerationParams:
        """A request's settings as the sampler will read them."""

    def draw(self, logits: torch.Tensor, requests) -> torch.Tensor:
        """Each row's token, on the logits' device."""


class LaneSamplerPart(SamplerPart, Protocol):
    """v05: told when requests take their lanes."""

    def bind(self, requests) -> None:
        """The requests have just taken their lanes."""


class CapturedSamplerPart(LaneSamplerPart, Protocol):
    """v07: draws inside a captured decode step."""

    variants: tuple[str, ...]     # the ways it may draw, one set of graphs each

    def variant(self, lanes, requests) -> str:
        """The way this step draws, for the lanes in use; requests are the step's, whose lane
        tensors it writes here where they change from step to step (v19's masks)."""

    def lane_tensors(self, variant: str) -> tuple:
        """Per-lane inputs the captured step reads besides the decode inputs."""

    def draw_lanes(self, variant: str, logits: torch.Tensor, positions: torch.Tensor,
                   *settings: torch.Tensor) -> torch.Tensor:
        """Inside the captured step: each lane's token."""


# --- inputs: the decode step's inputs ----------------------------------------------------------


class SpeculativeSamplerPart(CapturedSamplerPart, Protocol):
    """v17: keeps the guesses a verifying pass's logits agree with, and one token of its own."""

    def settle(self, requests: Sequence, logits: torch.Tensor,
               drawn: torch.Tensor) -> torch.Tensor:
        """A decode launched before these requests' tokens were read back (v14's) drew `drawn`
        (one a request, on the device) from `logits` (by lane); now that the host has them, the
        tokens the step run in order would draw (drawn itself where a draw needs nothing only
        the host knows)."""

    def accept(self, logits: torch.Tensor, requests: Sequence,
               guesses: Sequence[Sequence[int]]) -> list[list[int]]:
        """Per request, the tokens it keeps: logits holds len(guesses[i]) + 1 rows for request
        i, the rows after its last known token and after each guess."""

    def draws_rows_alone(self, requests: Sequence) -> bool:
        """Whether what a verifying pass of these requests keeps follows from each row's own
        draw (as a decode lane draws) alone: then the runner may draw the rows inside a graph
        and ask agreeing(); else it hands accept() the rows' logits."""

    def agreeing(self, guesses: Sequence[Sequence[int]],
                 drawn: Sequence[list[int]]) -> list[list[int]]:
        """Per request, the tokens it keeps, given the engine's own draw after its last token
        and after each guess (drawn[i] holds len(guesses[i]) + 1)."""


# --- grammar (v19): the tokens a request's grammar allows next ---------------------------------


class GrammarPart(Protocol):
    """v19: per request, a matcher of its GenerationParams.grammar, kept in step with its
    tokens; the masks of its next draws."""

    words: int                    # int32 words a bitmask row holds (contract bitmask_words)

    def block(self, rows: int) -> torch.Tensor:
        """A host bitmask of `rows` rows, to fill."""

    def masks(self, requests: Sequence) -> torch.Tensor:
        """A host bitmask (int32), row i the tokens requests[i]'s grammar allows next, all of
        them for a request without one. A request whose grammar allows nothing is finished
        here (STOP where complete, else failed)."""

    def fill_along(self, request, guesses: Sequence[int], bitmask: torch.Tensor) -> None:
        """Rows 0..len(guesses) of bitmask := the masks after the request's tokens and after
        each guess in turn (all tokens past a guess the grammar refuses); the matcher is left
        as it was."""

    def masked(self, logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        """logits with every token the bitmask rows leave out set to -inf."""


# --- proposer (v17): guesses the next tokens cheaply -------------------------------------------


class ProposerPart(Protocol):
    """v17: up to k guesses of each request's next tokens."""

    def propose(self, requests: Sequence, k: int) -> list[list[int]]:
        """Per request, at most k guessed tokens to follow its sequence (maybe none)."""


class InputsPart(Protocol):
    """v05: a decode pass's inputs, one row per lane."""

    lanes: torch.Tensor           # the lanes of the last write, in its order, on the device

    def write(self, requests: Sequence) -> tuple:
        """This step's inputs of these requests' lanes, for the decode pass."""


class StaticInputsPart(InputsPart, Protocol):
    """v06: the inputs in buffers allocated once."""

    tensors: tuple                # the buffers every decode step reads: the same at each step


class OverlapInputsPart(StaticInputsPart, Protocol):
    """v14: inputs that may feed tokens not yet read back."""

    fed: torch.Tensor | None      # set while a decode ahead is written: its token ids on device

    def staged(self, rows: Sequence[int]) -> torch.Tensor:
        """These ints as an index on the device, staged as the inputs are (no host wait)."""


# --- runner: the passes ------------------------------------------------------------------------


class RunnerPart(Protocol):
    """v02: owns the weights and runs the model's passes over the K/V memory."""

    config: ModelConfig           # the model it runs
    device: torch.device          # where its passes run
    weights: Any                  # the weights it loaded (what a harness counts the bytes of)

    def forward_ragged(self, token_ids: list[int], req_indptr: torch.Tensor) -> torch.Tensor:
        """Float logits of every row of a ragged batch, no cache."""

    def logits(self, token_ids: list[int]) -> torch.Tensor:
        """Float logits of every row of one sequence, no cache."""


class CacheRunnerPart(RunnerPart, Protocol):
    """v02: passes by request id, each request's chunk after what it has cached."""

    def prefill(self, request_ids: Sequence[Hashable], prompts: Sequence[Sequence[int]]):
        """Requests without a cache take one and compute their prompts: last rows' logits."""

    def decode(self, request_ids: Sequence[Hashable], sequences: Sequence[Sequence[int]]):
        """Each request's last token, all before it cached: logits."""


class StepRunnerPart(RunnerPart, Protocol):
    """v03: passes over requests, a step's batch to its tokens."""

    def run(self, batch) -> torch.Tensor:
        """Each request's next token, in batch.requests order, on the device."""

    def prefill(self, requests: Sequence) -> torch.Tensor:
        """Requests without K/V take it and compute their sequences: last rows' logits."""

    def decode(self, requests: Sequence) -> torch.Tensor:
        """Each request's last token, all before it computed: logits."""


class LaneRunnerPart(StepRunnerPart, Protocol):
    """v05: a decode pass over every lane."""

    def step_lanes(self, requests: Sequence) -> tuple:
        """One lane-shaped pass over these requests' lanes: logits and draws (or None) by lane."""


# --- policy and scheduler ----------------------------------------------------------------------


class PolicyPart(Protocol):
    """v03: who may join the running batch."""

    def check(self, request) -> None:
        """RequestError if it could never be admitted."""

    def admit(self, waiting, running: list) -> int:
        """How many waiting requests, from the front, join this step."""


class BudgetPolicyPart(PolicyPart, Protocol):
    """v15: a token budget a step, prompts computed in slices."""

    budget: int                   # rows a step computes

    def admits(self, request, running: list) -> bool:
        """Whether the request at the head of the queue may join now."""


class SpeculativePolicyPart(BudgetPolicyPart, Protocol):
    """v17: how many tokens a step guesses, where speculation pays."""

    def guesses(self, running: Sequence, waiting: Sequence) -> int:
        """Guesses per request for a step of these running and waiting requests (0: none)."""

    def observe(self, guesses: int, kept: Sequence[int]) -> None:
        """A step ran, guessing `guesses` tokens a decode; its decoding requests kept these many
        tokens each (empty where it guessed none)."""


class SchedulerPart(Protocol):
    """v03: who runs each step; it owns the requests' lifecycles."""

    last_stats: Any               # what the last step ran (StepStats), None before one

    def check(self, request) -> None:
        """RequestError if its policy could never admit the request (changes nothing)."""

    def add(self, request) -> None:
        """Queue the request (checked first)."""

    def schedule(self):
        """This step's batch, or None when nothing runs."""

    def postprocess(self, batch, tokens: list[int]) -> list[RequestOutput]:
        """Hand each request its token; finished ones free their K/V."""

    def abort(self, request) -> None:
        """Finish a waiting or running request and free its K/V."""

    def has_unfinished(self) -> bool:
        """Whether any request waits or runs."""


class PreemptingSchedulerPart(SchedulerPart, Protocol):
    """v08: running requests may be preempted when blocks run out."""

    num_preemptions: int          # preemptions so far

    def schedule(self, reserved: bool = False):
        """This step's batch; reserved: a decode launched ahead holds the blocks, none preempted."""


class SpeculativeSchedulerPart(PreemptingSchedulerPart, Protocol):
    """v17: a batch says how many tokens its decodes may guess; a request may take several."""

    def guesses(self) -> int:
        """Guesses per request the next step would make, for the running requests now."""

    def postprocess(self, batch, tokens: list) -> list[RequestOutput]:
        """Hand each request its token, or its tokens (a list, where the batch guessed)."""


# --- loop: the engine callers drive ------------------------------------------------------------


class LoopPart(Protocol):
    """v00: the engine: prompts in, tokens out."""

    def generate(self, prompts: list[list[int]], params: GenerationParams) -> list[list[int]]:
        """Every prompt's tokens."""

    def stream(self, prompt: list[int], params: GenerationParams):
        """One prompt's tokens as they come."""


class CacheLoopPart(LoopPart, Protocol):
    """v02: the kv_cache capability's passes, driven by the caller."""

    def prefill(self, request_ids: list, prompts: list[list[int]]) -> torch.Tensor:
        """Cache the prompts; logits of each last token."""

    def decode(self, request_ids: list, sequences: list[list[int]]) -> torch.Tensor:
        """Each sequence's last token after its cache; logits."""

    def release(self, request_id) -> None:
        """Drop the request's cache."""

    def logits(self, token_ids: list[int]) -> torch.Tensor:
        """Every row's logits of one sequence, no cache."""

    def forward_ragged(self, token_ids: list[int], req_indptr: torch.Tensor) -> torch.Tensor:
        """Every row's logits of a ragged batch, no cache."""


class StepLoopPart(CacheLoopPart, Protocol):
    """v03: requests added, stepped, read and aborted."""

    def add_request(self, prompt: list[int], params: GenerationParams) -> int:
        """Queue a request; its id."""

    def step(self) -> list[RequestOutput]:
        """Run one step; the outputs of the requests it ran."""

    def output(self, request_id: int) -> RequestOutput:
        """A request's output so far."""

    def take(self, request_id: int) -> RequestOutput:
        """output(); a finished request leaves the engine."""

    def abort(self, request_id: int) -> None:
        """Stop a request."""

    def has_unfinished(self) -> bool:
        """Whether any request waits or runs."""


# The StepLoopPart calls that run a pass: a rank that follows another (v16) must run each of them
# when the rank it follows does, so v16's engine sends its plan at each (spec/test_part_protocols
# checks that it overrides every one of them and records it under its name).
COMPUTING = ("step", "prefill", "decode", "logits", "forward_ragged")


# --- which version first needs which Protocol --------------------------------------------------

PROTOCOLS: dict[str, tuple[tuple[str, type], ...]] = {
    "model": (("v01_0", RaggedModelPart), ("v02", CachedModelPart), ("v05", LaneModelPart),
              ("v09", KernelModelPart), ("v12", PrefixModelPart), ("v16", ShardedModelPart)),
    "kv": (("v02", GrowingKVPart), ("v05", LanesKVPart), ("v08", PagedKVPart),
           ("v12", PrefixKVPart), ("v17", SpeculativeKVPart)),
    "sampler": (("v03", SamplerPart), ("v05", LaneSamplerPart), ("v07", CapturedSamplerPart),
                ("v17", SpeculativeSamplerPart)),
    "proposer": (("v17", ProposerPart),),
    "grammar": (("v19", GrammarPart),),
    "inputs": (("v05", InputsPart), ("v06", StaticInputsPart), ("v14", OverlapInputsPart)),
    "runner": (("v02", CacheRunnerPart), ("v03", StepRunnerPart), ("v05", LaneRunnerPart)),
    "request": (("v03", RequestPart), ("v05", LaneRequestPart), ("v15", ChunkedRequestPart),
                ("v17", SpeculativeRequestPart)),
    "policy": (("v03", PolicyPart), ("v15", BudgetPolicyPart), ("v17", SpeculativePolicyPart)),
    "scheduler": (("v03", SchedulerPart), ("v08", PreemptingSchedulerPart),
                  ("v17", SpeculativeSchedulerPart)),
    "loop": (("v00", LoopPart), ("v02", CacheLoopPart), ("v03", StepLoopPart)),
}


def short_version(version: str) -> str:
    """"v01_0" of "v01_0_ragged_batch", "v08" of "v08_paged_gqa_py" or "v08"."""
    return re.match(r"v\d\d(_\d(?![a-z]))?", version).group(0)


def protocol_of(part: str, version: str) -> type | None:
    """The Protocol the version's part satisfies: the last of PROTOCOLS[part] whose version is
    not after it (None: no version so early has a Protocol for the part, v00's model module)."""
    found, short = None, short_version(version)
    for first, protocol in PROTOCOLS.get(part, ()):
        if first <= short:  # "v01_0" < "v01_1" < "v02" < ... < "v16", as strings
            found = protocol
    return found


def declared(protocol: type) -> dict[str, Any]:
    """The Protocol's members, its bases' included: name -> its function, or its annotation
    (an attribute; a Protocol there is an object callers may reach for its own members)."""
    out: dict[str, Any] = {}
    for cls in reversed(protocol.__mro__):
        if cls in (object, Protocol) or not getattr(cls, "_is_protocol", False):
            continue
        for name, annotation in getattr(cls, "__annotations__", {}).items():
            # A string under `from __future__ import annotations`: a Protocol of this module's
            # is looked up by its name, any other annotation kept as written.
            out[name] = globals().get(annotation, annotation) if isinstance(annotation, str) \
                else annotation
        for name, value in vars(cls).items():
            if callable(value) and (not name.startswith("_") or name == "__contains__"):
                out[name] = value
    return out
