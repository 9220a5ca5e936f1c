"""The engine contract: the one import path of plain types shared by implementations, specs and
harness.

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
ChunkedPrefillAPI, ..., StructuredOutputAPI), that
lists only the methods the capability adds and inherits from Protocol alone; API_OF maps each
capability to its Protocol. An engine satisfies, side by side, the API of every capability its
version declares (`lacking(engine, CAPABILITIES)` names what it misses), whatever classes it is
made of. A capability that adds no method (continuous_batching, overlap, chunked_prefill) keeps
its promise in its Protocol's docstring. Layers and SplitGQALayers are what the `layers` object
offers, Sampler what a sampling version exports as `draw`.

A version's engine is assembled from parts (`Recipe`): PART_NAMES in assembly order, each
written by some version, a version's recipe being its predecessor's with the parts its idea
changes swapped (`Recipe.replace`); `Assembly` is what each part is built from. `torchlet parts
vNN` prints a version's recipe, and the docs site shows it on the version's page.

A kernel's launcher is a torch op made with `kernel_op` (and `fake_of`, its shapes-only twin):
specs and graph recorders see one op a launch.

Specs reach engines only through these names; nothing private.

The names live in six modules, one concern each: parts.py (the parts' seams: a Protocol per
part listing what other parts may use of it, and the version that first needs each; read it
first), values.py (the capability names, errors, ModelConfig, Checkpoint, GenerationParams,
RequestOutput and the request checks), quantized.py (QuantizedTensor: a weight matrix stored
as grouped integers, GGUF's blocks among them), grammar.py (Grammar and GrammarMatcher: a
request's constraint over token ids, as v19 reads it), capabilities.py (the engine's Protocols, API_OF, lacking)
and recipe.py (build options and their roles, PART_NAMES, Recipe, Assembly, kernel_op). A reader opens the one they need; every caller imports
this package, never a module of it.
"""
from __future__ import annotations

# Every name of the four modules, re-exported: implementations import torchlet.contract only.
from .capabilities import (API_OF, ChunkedPrefillAPI, ContinuousBatchingAPI, DecodeLanesAPI,
                           GenerateAPI, GraphReplayAPI, KVCacheAPI, Layers, OverlapAPI, PagedKVAPI,
                           PrefixCacheAPI, QuantizedWeightsAPI, RaggedBatchAPI, RequestStatesAPI, Sampler, SamplingAPI,
                           SpeculativeAPI, LiveLanesAPI, SplitGQALayers, StaticBuffersAPI, StructuredOutputAPI, TensorParallelAPI, lacking,
                           members,
                           missing_members)
from .parts import (COMPUTING, PROTOCOLS, BudgetPolicyPart, CacheLoopPart, CacheRunnerPart,
                    CachedModelPart, CapturedSamplerPart, ChunkedRequestPart, GrammarPart, GrowingKVPart,
                    InputsPart, KernelModelPart, KernelOps, KVPart, LaneModelPart,
                    LaneRequestPart, LaneRunnerPart, LaneSamplerPart, LanesKVPart, LoopPart,
                    OverlapInputsPart, PagedKVPart, PolicyPart, PrefixKVPart, PrefixMemory,
                    PrefixModelPart, PreemptingSchedulerPart, ProposerPart, RaggedModelPart,
                    RequestPart, RunnerPart, SamplerPart, SchedulerPart, ShardedModelPart,
                    SpeculativeKVPart, SpeculativePolicyPart, SpeculativeRequestPart,
                    SpeculativeSamplerPart, SpeculativeSchedulerPart, StaticInputsPart,
                    StepLoopPart, StepRunnerPart, declared, protocol_of)
from .grammar import Grammar, GrammarMatcher, bitmask_words
from .quantized import QuantizedTensor, dequantized
from .recipe import (BLOCK_SIZE, MAX_LEN, MAX_RUNNING, MAX_STEP_TOKENS, NUM_BLOCKS,
                     PAGED_DECODE_ATTENTION, PART_NAMES, ROLES, Assembly, BuildOption, Recipe,
                     Served, check_build, check_device, fake_of, kernel_op)
from .values import (ALL_CAPABILITIES, CHUNKED_PREFILL, CONTINUOUS_BATCHING, DECODE_LANES, FUSED,
                     GENERATE, GRAPH_REPLAY, KV_CACHE, LIVE_LANES, MAX_TEMPERATURE, MIN_TEMPERATURE, OVERLAP,
                     PAGED_KV, PREFIX_CACHE, QUANTIZED_WEIGHTS, RAGGED_BATCH, REQUEST_STATES, SAMPLING, SPECULATIVE,
                     SPLIT_GQA, STATIC_BUFFERS, STRUCTURED_OUTPUT, TENSOR_PARALLEL, TRITON_BASICS, TRITON_PAGED, BuildError,
                     Checkpoint, CheckpointError, FinishReason, GenerationParams, ModelConfig,
                     RequestError, RequestOutput, RequestState, TokenView, TorchletError, UnknownVersionError,
                     cast_tensors, check_grammar, check_params, check_prompts, check_request, check_sampling,
                     flatten, layer_tensors)
