"""v16_tensor_parallel: one model sharded over the ranks of a torch.distributed group.

What it introduces: built on every rank of a process group (gloo here, NCCL on GPUs; the harness
starts the group, torchlet.parallel), the engine holds its rank's shard, Megatron-style: q/k/v
and gate/up split by output rows (whole heads, a share of the intermediate), o and down by input
columns and summed by one all-reduce each, the embedding and the LM head split by vocabulary (a
masked lookup summed by an all-reduce, the logits' slices gathered). A rank's K/V pool holds
only its KV heads; with fewer KV heads than ranks, a KV head is replicated on the ranks that
share it. Rank 0's engine is the one called; the others follow its plans (contract:
TensorParallelAPI).

Why v15 needs it: a model whose weights and K/V outgrow one device cannot run on v15 at all.

Core principle: sharding changes where the maths runs, never what it computes. At TP=2 in
float64 the tokens are the oracle's (greedy and seeded), and the logits equal TP=1's within
float64's tolerance, on an untied Llama (6 query heads on 2 KV heads, split evenly), on 5 query
heads sharing 1 KV head (replicated), and on a tied Llama with 3 KV heads (split 2 and 1, as
SmolLM2's are) and an o-projection bias; and greedy
tokens are the oracle's at TP=2 and TP=3 on heads whose head_dim is declared apart from the
hidden size, over GQA ratios of 4:1, 6:2, 6:3, 4:2 and 2:2 (2:2 at TP=2 alone). Every rank
runs in a child process over gloo on loopback (spec/support/ranks/ranks.py); what a rank does is read from outside it: the
collectives it calls (torch.distributed wrapped in the rank), the weights its matmuls read (the
ops it dispatches), the K/V it stores (the kv_cache capability), the bytes of the storages its
engine holds (every tensor reachable from it, each storage counted once and whole). On the
kernels a rank's one-row MLP output is all-reduced before it joins the stream (v13 leaves down's
partial sums for the next launch to add to the stream and norm; the sharded ops do not fuse
the norms), read from the all-reduce's calls. A call that
rank 0 refuses, or a request aborted before it ran, leaves every rank in step: the next call's
tokens are the oracle's.

Files to compare: implementations/v16_tensor_parallel/model.py (ShardedOps, VocabShard)
against implementations/v13_fused/model.py (FusedOps); implementations/v16_tensor_parallel/
loop.py (TensorParallelEngine) against implementations/v14_overlap/loop.py; shard.py is new.

Tradeoff left visible: every rank runs the scheduler, the K/V manager and the sampler itself
(the same events in, the same decisions out), so no block table or token crosses a rank, at the
price of the host's per-step work on every rank; the norms and a replicated KV head's weights
are held on every rank; a forward pass waits on 2 all-reduces a layer.
"""
from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from spec.support.oracles import sampling_oracle
from spec.support.models.hf_dirs import save_tiny
from spec.support.models.fixtures import FIXTURES_DIR, tiny_checkpoint
from spec.support.oracles.oracle import greedy, hf_model
from spec.support.oracles.prompts import MARGIN
from spec.support.ranks.ranks import held_bytes, run_ranks, spec_for
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import TENSOR_PARALLEL, FinishReason, GenerationParams, TorchletError

# Against the first version to export this sharded model and this engine (a later version that
# re-exports them runs its own tensor-parallel spec: v17's ranks propose and verify alike).
pytestmark = pytest.mark.spec(needs=TENSOR_PARALLEL,
                              first_with=("ShardedModel", "TensorParallelEngine"))

F64 = torch.float64
NEW = 8
GREEDY = GenerationParams(max_new_tokens=NEW)
EXACT_F64 = dict(atol=1e-9, rtol=1e-9)  # float64 sums in another order: far below float32's
EXACT = dict(overlap=False, use_graphs=False)  # one forward pass a call: what the counts read
# A Llama with 3 KV heads of 2 query heads each (split 2 and 1 over 2 ranks, as SmolLM2's 3 KV
# heads are), biases on q, k, v and o (the o bias is added once, not once a rank), and its LM
# head tied to its embedding (one vocabulary slice serves both), on an odd vocabulary of 259.
UNEVEN = dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=3, head_dim=16,
              intermediate_size=160, attention_bias=True, tie_word_embeddings=True)


# Checkpoints these specs write with Hugging Face's save_pretrained (hf_dirs.save_tiny), once a
# run, by name: (family, overrides). Beside UNEVEN, heads whose head_dim is declared apart from
# hidden / heads (as Qwen3's are) on more GQA ratios: 4 query heads on 1 KV head, 6 on 2, 6 on 3
# (with biases), and 2 on 2 (a Qwen2, untied: tied, its greedy tokens repeat one token).
SAVED = {
    "uneven": ("llama", UNEVEN),
    "gqa4to1": ("llama", dict(hidden_size=48, num_attention_heads=4, num_key_value_heads=1,
                              head_dim=24)),
    "gqa6to2": ("llama", dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=2,
                              head_dim=16)),
    "gqa6to3": ("llama", dict(hidden_size=48, num_attention_heads=6, num_key_value_heads=3,
                              head_dim=12, attention_bias=True)),
    "gqa2to2": ("qwen2", dict(hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
                              head_dim=24, tie_word_embeddings=False)),
}


@functools.lru_cache(maxsize=None)
def saved_dir(name: str) -> str:
    family, overrides = SAVED[name]
    out = Path(tempfile.mkdtemp(prefix="torchlet-tp-")) / name
    save_tiny(out, family, seed=16, **overrides)
    return str(out)


def model_dir(name: str) -> str:
    return saved_dir(name) if name in SAVED else str(FIXTURES_DIR / name)


def checkpoint(name: str):
    return load_hf_dir(model_dir(name)) if name in SAVED else tiny_checkpoint(name)


# tiny_llama: 6 heads on 2 KV heads, split evenly (and the golden samples' fixture); tiny_gqa5:
# 5 query heads on 1 KV head, replicated, with qkv biases.
CASES = ("tiny_llama", "tiny_gqa5", "uneven")
SAMPLED = "tiny_llama"
# Head shapes with head_dim declared apart from hidden / heads: tiny_head_dim (4 heads of 32 on a
# hidden size of 64, 2 KV heads) and SAVED's. Over 3 ranks a KV head is each rank's own (6:3),
# shared by two ranks while the third holds the other (6:2, 4:2), or shared by all (4:1); 2:2
# runs at TP=2 alone (over 3 ranks, two would share a KV head of one query head: a BuildError).
SHAPES = ("tiny_head_dim", "gqa4to1", "gqa6to2", "gqa6to3", "gqa2to2")
TP3_SHAPES = SHAPES[:-1]
# The failure paths' model, and what the bytes held are measured on: an evenly split one.
EVEN = "tiny_llama"


@functools.lru_cache(maxsize=None)
def oracle_cases(name: str, count: int = 2):
    """(prompt, the oracle's NEW greedy tokens) for prompts whose float64 gap stays above MARGIN."""
    model, vocab = hf_model(checkpoint(name)), checkpoint(name).config.vocab_size
    g, found = torch.Generator().manual_seed(16), []
    for _ in range(60):
        prompt = torch.randint(3, vocab, (int(torch.randint(2, 24, (1,), generator=g)),),
                               generator=g).tolist()
        with torch.no_grad():
            ref = greedy(model, prompt, NEW, stop_below=MARGIN)
        if len(ref.tokens) == NEW and ref.horizon(MARGIN) == NEW:
            found.append((prompt, ref.tokens))
            if len(found) == count:
                return found
    raise AssertionError(f"only {len(found)} screened prompts for {name}")


def sampled_cases(name: str):
    """(prompt, params, golden tokens) of the sampling oracle's seeded cases (named fixtures)."""
    if name != SAMPLED:
        return []
    return [(list(p), GenerationParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                                       min_p=s.min_p, seed=seed, max_new_tokens=len(t)), list(t))
            for p, s, seed, t in sampling_oracle.golden_cases(name)[:2]]


# --- what a rank is observed doing (run on rank 0, and in this process at TP=1) ---------------


class MatmulWeights(TorchDispatchMode):
    """Elements of the weight operand of every matmul dispatched whose operand has the model's
    hidden size as one side: the projections and the LM head, not attention's products."""

    def __init__(self, hidden: int):
        super().__init__()
        self.hidden, self.numel = hidden, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in ("linear", "matmul", "mm", "addmm"):
            w = args[1] if name in ("linear", "matmul") else args[-1]
            if self.hidden in w.shape:
                self.numel += w.numel()
        return func(*args, **kwargs or {})


def observe_one(engine, name, cases, sampled, counts):
    """Everything the specs compare, from one engine built EXACT on this rank (or alone)."""
    seen = {}
    prompt = cases[0][0]
    before = len(counts)
    seen["logits"] = engine.logits(prompt)
    seen["collectives_logits"] = counts[before:]
    with MatmulWeights(engine.config.hidden_size) as mode:
        engine.logits(prompt)
    seen["weights"] = mode.numel
    engine.prefill(["kv"], [prompt])
    seen["kv"] = [(k.clone(), v.clone()) for k, v in engine.cached_kv("kv")]
    seen["kv_bytes"] = engine.kv_bytes("kv")
    seen["shards"] = engine.shards()
    engine.release("kv")
    request = engine.add_request(prompt, GenerationParams(max_new_tokens=3))
    engine.step()  # the prompt
    before = len(counts)
    engine.step()  # one decode row
    seen["collectives_decode"] = counts[before:]
    engine.abort(request)
    return seen


UNSEEDED_NEW = 3 * NEW  # two seeds' draws of 9 tokens agreed in 2.4% of 150 seeds, of 24 in none


def unseeded_run(engine, prompt):
    """A request sampled without a seed, stepped UNSEEDED_NEW times: its tokens and rank 0's K/V
    of it. Long enough that ranks drawing with seeds of their own would draw apart."""
    request = engine.add_request(prompt, GenerationParams(temperature=1.0,
                                                          max_new_tokens=UNSEEDED_NEW + 1))
    for _ in range(UNSEEDED_NEW):
        engine.step()
    tokens = engine.output(request).tokens
    kv = [(k.clone(), v.clone()) for k, v in engine.cached_kv(request)]
    engine.abort(request)
    return tokens, kv


def greedy_tokens(ranks, counts, specs):
    """Rank 0: for each name, its spec's engine built on every rank, and its greedy tokens of
    its prompts."""
    return {name: ranks.build(spec).generate(prompts, GREEDY)
            for name, (spec, prompts) in specs.items()}


def observe(ranks, counts, specs, phases, shapes, held, failing):
    """Rank 0's scenario: for each case, an EXACT engine's observations (and an unseeded
    request's run on it), then the tokens of a default engine (overlap, the prefix cache, graphs
    where the version has them) and of a tight one (slices of 4 rows, a pool small enough to
    preempt); the greedy tokens of the other head shapes; the bytes an engine built from held
    holds; each failure path; then a kill. Only the phases asked for (see reads) run."""
    seen = {}
    for name, (exact, default, tight, cases, sampled) in specs.items():
        seen[name] = {}
        if phases & {"exact", "unseeded"}:
            engine = ranks.build(exact)
            seen[name]["rank"], seen[name]["world"] = engine.rank, engine.world_size
            if "exact" in phases:
                seen[name].update(observe_one(engine, name, cases, sampled, counts))
            if sampled and "unseeded" in phases:
                seen[name]["unseeded"] = unseeded_run(engine, cases[0][0])
        prompts = [p for p, _ in cases]
        if "default" in phases:
            engine = ranks.build(default)
            seen[name]["greedy"] = engine.generate(prompts + prompts[:1], GREEDY)
            seen[name]["sampled"] = [engine.generate([p], params)[0] for p, params in sampled]
        if "tight" in phases:
            engine = ranks.build(tight)
            seen[name]["tight"] = engine.generate(prompts, GREEDY)
    seen["shapes"] = greedy_tokens(ranks, counts, shapes)
    if "held" in phases:
        seen["held"] = held_bytes(ranks.build(held))
    seen["failures"] = after_failures(ranks, phases, *failing)
    ranks.close_engine()  # rank 1 reports its collectives when an engine closes
    seen["counts"] = list(counts)
    if "kill" in phases:
        seen["killed"] = after_a_kill(ranks, next(iter(specs.values()))[0])
    return seen


def after_a_kill(ranks, spec):
    """Rank 0: build, stop rank 1 (SIGKILL), call again: the call must fail, not hang. The
    error's class and text, or None when the call did not fail."""
    import os
    import signal

    engine = ranks.build(spec)
    engine.generate([[5, 6, 7]], GenerationParams(max_new_tokens=2))
    os.kill(int(os.environ["TORCHLET_SPEC_PEER_PID"]), signal.SIGKILL)
    try:
        engine.generate([[5, 6, 7]], GenerationParams(max_new_tokens=2))
    except TorchletError as e:
        return type(e).__name__, str(e)
    return None


@dataclass(frozen=True)
class StopWhen(GenerationParams):
    """Settings with a stop check of the caller's own, as the contract lets a subclass have."""

    when: Callable[[int], bool] = lambda token: False

    def stops_at(self, token: int):
        return FinishReason.STOP if self.when(token) else super().stops_at(token)


def refusal(call) -> str | None:
    """The class name of what call() raised; None when it returned."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the spec reads which
        return type(e).__name__
    return None


def abort_waiting(engine, prompts):
    """max_running=1: the second request waits while the first runs, and is aborted there.
    (Its state when aborted, its finish reason and tokens; the first one's tokens.)"""
    first, second = (engine.add_request(p, GREEDY) for p in prompts[:2])
    engine.step()
    state = engine.output(second).state.value
    engine.abort(second)
    while engine.has_unfinished():
        engine.step()
    aborted = engine.take(second)
    return state, aborted.finish_reason.value, aborted.tokens, engine.take(first).tokens


def refuse_requests(engine, prompts):
    """add_request refused on rank 0: a token past the vocabulary, and settings that cannot be
    sent to the other ranks (a stop check that is a lambda). What each raised."""
    past = prompts[0] + [engine.config.vocab_size]
    own = StopWhen(max_new_tokens=NEW, when=lambda token: token == 7)
    return [refusal(lambda: engine.add_request(past, GREEDY)),
            refusal(lambda: engine.add_request(prompts[0], own))]


def refuse_kv_calls(engine, prompts):
    """kv_cache (and ragged batch) calls with bad arguments on rank 0: what each raised. A good
    prefill and release between them."""
    p = prompts[0]
    calls = [lambda: engine.prefill(["a", "b"], [p]),  # two ids, one prompt
             lambda: engine.decode(["a"], [p + [5]]),  # nothing cached for "a"
             lambda: engine.decode(["a", "b"], [p]),  # two ids, one sequence
             lambda: engine.decode(["zz"], [p[:1]]),  # one token, nothing cached
             lambda: engine.prefill([["a"]], [p]),  # an id that is no dict key
             lambda: engine.release(["a"]),
             lambda: engine.prefill([lambda: 0], [p]),  # an id that cannot be pickled
             lambda: engine.forward_ragged("abc", None)]
    raised = [refusal(call) for call in calls[:4]]
    engine.prefill(["ok"], [p])
    engine.release("ok")
    return raised + [refusal(call) for call in calls[4:]]


# Each failure path, by the phase that runs it: what it does on an engine of its own.
FAILURES = {"abort_waiting": abort_waiting, "refuse_requests": refuse_requests,
            "refuse_kv_calls": refuse_kv_calls}


def after_failures(ranks, phases, spec, waiting_spec, prompts):
    """Rank 0: each failure path asked for on an engine of its own, then (what it returned, that
    engine's greedy tokens of prompts, how many ranks answered its shards() gather)."""
    seen = {}
    for path in [p for p in FAILURES if p in phases]:
        engine = ranks.build(waiting_spec if path == "abort_waiting" else spec)
        did = FAILURES[path](engine, prompts)
        seen[path] = did, engine.generate(prompts, GREEDY), len(engine.shards())
    return seen


def tight_options(name):
    longest = max(len(p) for p, _ in oracle_cases(name)) + NEW
    blocks = 2 * -(-longest // 4) + 1  # one request's blocks at a time, and the null block
    return dict(max_step_tokens=4, max_running=2, block_size=4, num_blocks=blocks,
                poison_free_blocks=True)


def reads(*phases: str, case: str | None = None):
    """What a spec reads of the 2-rank run: these phases of observe(), and, for a spec without a
    case parameter, the case it reads. A run computes only what the collected specs read (a
    mutant's run names one or two), in one group of ranks; a spec not so marked reads the exact
    engine's observations of its case. Kept on the spec's function, where wanted() finds it."""
    def mark(spec):
        spec.reads = (case, frozenset(phases))
        return spec
    return mark


EXACT_ONLY = (None, frozenset({"exact"}))


def wanted(session, fixture: str = "tp2"):
    """The cases the collected specs of this page that read the fixture read, in CASES order,
    the phases, and the head shapes, in SHAPES order."""
    here = [i for i in session.items if i.module.__name__ == __name__ and fixture in
            getattr(i, "fixturenames", ())]
    params = [i.callspec.params if hasattr(i, "callspec") else {} for i in here]
    read = [getattr(i.function, "reads", EXACT_ONLY) for i in here]
    names = {p.get("name") for p in params} | {case for case, _ in read if case}
    phases = frozenset().union(*(phases for _, phases in read))
    shapes = {p.get("shape") for p in params}
    return (tuple(c for c in CASES if c in names), phases,
            tuple(s for s in SHAPES if s in shapes))


def screened(impl, names) -> dict:
    """name: (its EXACT engine's spec, its screened prompts), for greedy_tokens. (What the
    shards are cut to shows without graphs, whose captures made a 3-rank run 3x as long.)"""
    return {n: (spec_for(impl, model_dir(n), **EXACT), [p for p, _ in oracle_cases(n)])
            for n in names}


HELD = dict(num_blocks=9, block_size=16, **EXACT)  # a pool of a few blocks


def held_spec(impl):
    """EVEN in float32, its checkpoint's own dtype (a cast would copy a slice it is handed)."""
    return spec_for(impl, model_dir(EVEN), dtype="float32", **HELD)


def run_or_error(scenario, *args, world: int = 2):
    """The run's result, or the exception it failed with: a failed run (a stub, a mutant) is not
    started again for every spec that reads it, which would cost each a group's start-up."""
    try:
        return run_ranks(scenario, *args, world=world)
    except Exception as e:  # noqa: BLE001 - re-raised in every spec that reads the run
        return e


def result(run):
    if isinstance(run, Exception):
        # its traceback dropped: each raise would add this one's frames to those before it
        raise run.with_traceback(None)
    return run


@functools.lru_cache(maxsize=None)
def _tp2(impl, cases, phases, shapes):
    specs = {name: (spec_for(impl, model_dir(name), **EXACT), spec_for(impl, model_dir(name)),
                    spec_for(impl, model_dir(name), **tight_options(name)),
                    oracle_cases(name), [c[:2] for c in sampled_cases(name)])
             for name in cases}
    # the failure paths' engines overlap steps (a decode launched ahead of each read-back)
    # and cache prefixes, without graphs: what the plans carry, not what the captures cost
    failing = (spec_for(impl, model_dir(EVEN), use_graphs=False),
               spec_for(impl, model_dir(EVEN), use_graphs=False, max_running=1),
               [p for p, _ in oracle_cases(EVEN)] if phases & set(FAILURES) else [])
    return run_or_error(observe, specs, phases, screened(impl, shapes), held_spec(impl),
                        failing)


@pytest.fixture
def tp2(impl, request):
    """(rank 0's observations, [rank 1's report]) of one 2-rank run per version, of the cases,
    phases and head shapes the collected specs read."""
    return result(_tp2(impl, *wanted(request.session)))


@functools.lru_cache(maxsize=None)
def _tp3(impl, shapes):
    return run_or_error(greedy_tokens, screened(impl, shapes), world=3)


@pytest.fixture
def tp3(impl, request):
    """Rank 0's greedy tokens of each head shape the collected specs read, from one 3-rank run
    per version."""
    return result(_tp3(impl, wanted(request.session, "tp3")[2]))[0]


@functools.lru_cache(maxsize=None)
def _tp1(impl, name):
    engine = impl.build(checkpoint(name), dtype=F64, **EXACT)
    return observe_one(engine, name, oracle_cases(name), [], [])


# --- parity ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
@reads("exact", "default")
def test_tp2_greedy_tokens_are_the_oracles(impl, tp2, name):
    """An untied Llama, a replicated KV head, a tied Llama's uneven KV split with an o bias: the
    oracle's tokens, a repeated prompt's too (the prefix cache on, overlap on)."""
    seen, _ = tp2
    expected = [t for _, t in oracle_cases(name)]
    assert seen[name]["world"] == 2 and seen[name]["rank"] == 0
    assert seen[name]["greedy"] == expected + expected[:1]


@reads("default", case=SAMPLED)
def test_tp2_seeded_samples_are_the_golden_samples(impl, tp2):
    """Every rank samples from the gathered logits with the request's seed: rank 0's draws are
    the golden ones."""
    seen, _ = tp2
    assert seen[SAMPLED]["sampled"] == [t for *_, t in sampled_cases(SAMPLED)]


@pytest.mark.parametrize("name", CASES)
def test_tp2_logits_equal_tp1s(impl, tp2, name):
    seen, _ = tp2
    torch.testing.assert_close(seen[name]["logits"], _tp1(impl, name)["logits"],
                               **EXACT_F64)


@pytest.mark.parametrize("name", CASES)
@reads("tight")
def test_slices_a_tight_pool_and_preemption_keep_the_oracles_tokens(impl, tp2, name):
    """Chunked prefill (4-row budget), a pool for one request at a time (preemption): the ranks'
    schedulers make the same choices, so the tokens stay the oracle's."""
    seen, _ = tp2
    assert seen[name]["tight"] == [t for _, t in oracle_cases(name)]


@reads("unseeded", case=SAMPLED)
def test_an_unseeded_request_feeds_every_rank_the_tokens_rank_0_drew(impl, tp2):
    """No seed given: rank 0 draws one and sends it with the request, so every rank draws the
    same tokens and feeds them back. Rank 0's K/V of the sampled sequence is then TP=1's K/V of
    those very tokens, for its KV heads (a rank that drew others would have fed its half of the
    embedding another token)."""
    seen, _ = tp2
    tokens, kv = seen[SAMPLED]["unseeded"]
    prompt = oracle_cases(SAMPLED)[0][0]
    engine = impl.build(checkpoint(SAMPLED), dtype=F64, **EXACT)
    engine.prefill(["again"], [prompt + tokens])
    full = engine.cached_kv("again")
    for (k, v), (fk, fv) in zip(kv, full, strict=True):
        rows, mine = k.shape[0], k.shape[1]
        torch.testing.assert_close(k, fk[:rows, :mine], **EXACT_F64)
        torch.testing.assert_close(v, fv[:rows, :mine], **EXACT_F64)


# --- sharding, observed ----------------------------------------------------------------------


@reads("exact", case="tiny_llama")
def test_each_rank_reads_half_the_weights_of_an_evenly_split_model(impl, tp2):
    """tiny_llama (6 heads on 2 KV heads, an even intermediate and vocabulary): rank 0's matmuls
    in one forward pass read exactly half the projection and LM-head elements TP=1's read."""
    seen, _ = tp2
    assert seen["tiny_llama"]["weights"] * 2 == _tp1(impl, "tiny_llama")["weights"]


@pytest.mark.parametrize("name", CASES)
def test_each_rank_reads_only_its_share_of_the_weights(impl, tp2, name):
    """At most its heads' and its intermediate's share, plus one vocabulary slice: never the
    whole model."""
    seen, _ = tp2
    full = _tp1(impl, name)["weights"]
    assert full * 0.3 < seen[name]["weights"] <= full * 0.65


@pytest.mark.parametrize("name", CASES)
def test_a_rank_stores_the_kv_of_its_own_kv_heads(impl, tp2, name):
    """Rank 0 holds the first of the KV heads (its run of them), with TP=1's values for those
    heads; with one KV head for two ranks, that head, replicated."""
    seen, _ = tp2
    full = _tp1(impl, name)["kv"]
    heads = checkpoint(name).config.num_kv_heads
    mine = seen[name]["kv"][0][0].shape[1]
    assert mine == (-(-heads // 2) if heads >= 2 else 1)
    for (k, v), (fk, fv) in zip(seen[name]["kv"], full, strict=True):
        torch.testing.assert_close(k, fk[:, :mine], **EXACT_F64)
        torch.testing.assert_close(v, fv[:, :mine], **EXACT_F64)
    assert seen[name]["kv_bytes"] * heads == _tp1(impl, name)["kv_bytes"] * mine


@reads("exact", case="tiny_llama")
def test_shards_reports_what_the_shards_hold(impl, tp2):
    """The report agrees with the shards observed: the evenly split model's ranks hold halves
    of its heads, MLP rows and vocabulary, in rank order, and each half of TP=1's weights and
    K/V bytes."""
    seen, _ = tp2
    alone = _tp1(impl, "tiny_llama")["shards"][0]
    config = checkpoint("tiny_llama").config
    whole = {"heads": config.num_heads, "kv_heads": config.num_kv_heads,
             "intermediate": config.intermediate_size, "vocab": config.vocab_size}
    for part, size in whole.items():  # halves, in rank order
        assert [r[part] for r in seen["tiny_llama"]["shards"]] == [[0, size // 2],
                                                                   [size // 2, size]]
        assert alone[part] == [0, size]
    for rank in seen["tiny_llama"]["shards"]:
        assert rank["kv"] * 2 == alone["kv"]
        assert abs(rank["weights"] * 2 - alone["weights"]) <= alone["weights"] * 0.05


# --- collectives, counted ----------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_a_forward_pass_all_reduces_twice_a_layer_and_gathers_the_logits_once(impl, tp2, name):
    """Per forward pass (a prompt's, a decode step's): one all-reduce after o and one after down
    in every layer, one for the embedding's lookup, and one gather of the LM head's slices."""
    seen, _ = tp2
    layers = checkpoint(name).config.num_layers
    for key in ("collectives_logits", "collectives_decode"):
        calls = seen[name][key]
        assert calls.count("all_reduce") == 2 * layers + 1, (key, calls)
        assert calls.count("all_gather") == 1, (key, calls)
        assert set(calls) <= {"all_reduce", "all_gather"}, (key, calls)


@reads("exact", "unseeded", "default", "tight", *FAILURES, case="tiny_llama")
def test_the_other_rank_calls_the_same_collectives_in_the_same_order(impl, tp2):
    seen, followers = tp2
    compute = {"all_reduce", "all_gather"}
    assert ([c for c in followers[0].collectives if c in compute]
            == [c for c in seen["counts"] if c in compute])


@pytest.mark.spec(kernel_path=True, part="model")
def test_on_the_kernels_a_ranks_one_row_mlp_output_is_all_reduced_before_it_joins_the_stream(
        impl, monkeypatch):
    """v13's ops run a one-row MLP sublayer on the kernels as two launches, down's output joining
    the residual stream inside the second. A rank's MLP output is its partial sum: the sharded
    ops must all-reduce it first, so on the kernels too their sublayer calls the all-reduce once,
    on the MLP's output, and what joins the stream is what the all-reduce left (here, one rank's
    group, recorded: the sum unchanged); the stream and its norm are v00's maths on it."""
    from spec.support.oracles import kernel_reference as ref

    ops = impl.package.ShardedOps().for_device("cpu", torch.float32)
    assert ops.on_triton, "the kernel path runs under the interpreter here"
    reduced = []
    monkeypatch.setattr(torch.distributed, "all_reduce",
                        lambda t, *args, **kwargs: reduced.append(t.clone()))
    gen = torch.Generator().manual_seed(0)
    hidden, inter = 24, 40
    attended, residual = torch.randn(1, hidden, generator=gen), torch.randn(1, hidden,
                                                                             generator=gen)
    w = {"post_attention_layernorm.weight": torch.rand(hidden, generator=gen) + 0.5,
         "mlp.gate_up_proj.weight": torch.randn(2 * inter, hidden, generator=gen) * 0.2,
         "mlp.down_proj.weight": torch.randn(hidden, inter, generator=gen) * 0.2}
    after = torch.rand(hidden, generator=gen) + 0.5
    alone = ops.mlp(torch.randn(1, hidden, generator=gen), w)  # the rank's MLP: its sum reduced
    assert len(reduced) == 1 and torch.equal(reduced.pop(), alone)
    normed, stream = ops.mlp_sublayer(attended, residual, w, after, 1e-6)
    assert len(reduced) == 1 and reduced[0].shape == (1, hidden), [t.shape for t in reduced]
    h = ref.rms_norm(attended + residual, w["post_attention_layernorm.weight"], 1e-6)
    gate, up = (h @ w["mlp.gate_up_proj.weight"].double().T).chunk(2, dim=-1)
    mlp_out = ref.swiglu(gate, up) @ w["mlp.down_proj.weight"].double().T
    torch.testing.assert_close(reduced[0].double(), mlp_out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(stream, attended + residual + reduced[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(normed.double(), ref.rms_norm(stream, after, 1e-6),
                               rtol=1e-4, atol=1e-4)


# --- a rank that stops -------------------------------------------------------------------------


@reads("kill", case="tiny_llama")
def test_a_killed_rank_makes_rank_0s_next_call_fail_with_a_clear_error(impl, tp2):
    """Rank 1 killed between two calls: rank 0's next call raises a TorchletError of one line
    naming tensor parallelism (the run's own guard fails the spec if it hangs instead)."""
    seen, _ = tp2
    assert seen["killed"] is not None, "the call after the kill did not fail"
    kind, message = seen["killed"]
    assert kind == "TorchletError" and "tensor parallel" in message and "\n" not in message


# --- more head shapes, over 2 and 3 ranks -------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@reads()  # the head shapes alone
def test_tp2_greedy_tokens_of_declared_head_dims_and_more_gqa_ratios_are_the_oracles(
        impl, tp2, shape):
    """head_dim declared apart from hidden / heads, on 4:1 (one KV head on both ranks), 6:2,
    4:2 and 2:2 (one each), 6:3 (2 and 1): a slice of q/k/v or o cut by hidden / heads, or a
    KV head cut apart from its query heads, changes the tokens."""
    seen, _ = tp2
    assert seen["shapes"][shape] == [t for _, t in oracle_cases(shape)]


@pytest.mark.parametrize("shape", TP3_SHAPES)
def test_tp3_greedy_tokens_are_the_oracles(impl, tp3, shape):
    """Over 3 ranks a KV head is each rank's own (6:3), shared by all three (4:1), or shared by
    two while the third holds the other alone (6:2, 4:2): the ranks that share a KV head split
    its query heads, and only they do."""
    assert tp3[shape] == [t for _, t in oracle_cases(shape)]


# --- what a rank holds ---------------------------------------------------------------------------


@reads("held")
def test_each_rank_holds_the_storage_of_its_half_of_an_evenly_split_model_alone(impl, tp2):
    """Right after the build, every rank's engine holds (in bytes of distinct storages, each
    whole) at most half of each split tensor and of TP=1's K/V pool, the norms whole, and what
    TP=1's engine holds besides the model. A rank that kept a whole tensor and used a slice of
    it holds the whole: its storage, not the slice's size, is what it costs."""
    seen, followers = tp2
    ckpt = checkpoint(EVEN)
    config, tensors = ckpt.config, ckpt.tensors  # float32, untied: every tensor its own
    weights = sum(t.numel() * t.element_size() for t in tensors.values())
    norms = sum(t.numel() * t.element_size() for n, t in tensors.items()
                if n.endswith("norm.weight"))
    kv = (HELD["num_blocks"] * HELD["block_size"] * config.num_kv_heads * config.head_dim
          * 2 * config.num_layers * 4)  # k and v, float32
    alone = held_bytes(impl.build(ckpt, dtype=torch.float32, **HELD))
    share = norms + (weights - norms) // 2 + kv // 2 + (alone - weights - kv)
    # room for a buffer of a rank's own (2% of the model's bytes), below what a whole tensor
    # kept costs (every layer's whole o_proj: 5% more; the whole embedding: 6%)
    room = weights // 50
    spec = held_spec(impl)
    held = [seen["held"], *(b for s, b in followers[0].held if s == spec)]
    assert len(held) == 2 and max(held) <= share + room, (held, share)


# --- failure paths: every rank alive and in step after them -------------------------------------


@reads("abort_waiting")
def test_aborting_a_waiting_request_leaves_every_rank_in_step(impl, tp2):
    """With one request running, a second waits, and is aborted there: it finishes aborted
    with no token, the first one's tokens are the oracle's, and so are the next generate's."""
    seen, _ = tp2
    (state, reason, tokens, first), after, answered = seen["failures"]["abort_waiting"]
    expected = [t for _, t in oracle_cases(EVEN)]
    assert (state, reason, tokens) == ("waiting", "aborted", [])
    assert first == expected[0] and after == expected and answered == 2


@reads("refuse_requests")
def test_a_request_refused_on_rank_0_leaves_every_rank_in_step(impl, tp2):
    """A token past the vocabulary, and settings that cannot reach the other ranks (a stop
    check that is a lambda): add_request raises a RequestError on rank 0, nothing reaches the
    others, and the next generate's tokens are the oracle's."""
    seen, _ = tp2
    refused, after, answered = seen["failures"]["refuse_requests"]
    assert refused == ["RequestError", "RequestError"]
    assert after == [t for _, t in oracle_cases(EVEN)] and answered == 2


@reads("refuse_kv_calls")
def test_a_refused_kv_cache_call_leaves_every_rank_in_step(impl, tp2):
    """prefill, decode and release with ids and token lists that do not pair up, an id that is
    no dict key or cannot be pickled, nothing cached; a ragged batch of no token ids: each call
    raises on rank 0, every rank still answers, and the next generate's tokens are the
    oracle's."""
    seen, _ = tp2
    refused, after, answered = seen["failures"]["refuse_kv_calls"]
    assert None not in refused, refused
    assert after == [t for _, t in oracle_cases(EVEN)] and answered == 2


# --- two GPUs over NCCL (marker gpu2; skipped, saying why, with fewer) ------------------------


def on_two_gpus(ranks, counts, specs):
    """Rank 0 on cuda:0, rank 1 on cuda:1: each spec's greedy tokens and one prompt's logits."""
    seen = []
    for spec, prompts in specs:
        engine = ranks.build(spec)
        seen.append((engine.generate(prompts, GREEDY), engine.logits(prompts[0]).cpu(),
                     engine.graph_stats()))
    return seen


@functools.lru_cache(maxsize=None)
def _nccl(impl):
    name = "tiny_llama"
    prompts = [p for p, _ in oracle_cases(name)]
    specs = [(spec_for(impl, model_dir(name), "cuda", dtype), prompts)
             for dtype in ("float32", "bfloat16")]
    specs.append((spec_for(impl, model_dir(name), "cuda", "float32", use_graphs=False), prompts))
    return run_ranks(on_two_gpus, specs, device="cuda")[0]


def _alone(impl, dtype):
    name = "tiny_llama"
    engine = impl.build(checkpoint(name), device="cuda", dtype=dtype)
    prompts = [p for p, _ in oracle_cases(name)]
    return engine.generate(prompts, GREEDY), engine.logits(prompts[0]).cpu()


@pytest.mark.gpu
@pytest.mark.gpu2
def test_nccl_tp2_in_float32_gives_tp1s_tokens_and_logits(impl):
    (tokens, logits, _), *_ = _nccl(impl)
    alone_tokens, alone_logits = _alone(impl, torch.float32)
    assert tokens == alone_tokens
    torch.testing.assert_close(logits, alone_logits, atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.gpu2
def test_nccl_tp2_in_bfloat16_stays_within_bfloat16s_tolerance_of_tp1(impl):
    """bf16 sums in another order: the logits agree to bf16's resolution at their magnitude
    (8 significant bits: 2^-8 of the largest logit, twice over for the two orders)."""
    _, (tokens, logits, _), _ = _nccl(impl)
    _, alone = _alone(impl, torch.bfloat16)
    scale = float(alone.abs().max())
    torch.testing.assert_close(logits, alone, atol=2 * scale * 2 ** -8, rtol=0)


@pytest.mark.gpu
@pytest.mark.gpu2
def test_cuda_graphs_capture_the_all_reduce_and_replay_as_eager_runs(impl):
    (graphed, _, stats), _, (eager, _, _) = _nccl(impl)
    assert graphed == eager
    assert sum(s.get("replays", 0) for s in stats.values()) > 0, stats
