"""v19_structured_output: answers that always parse, through a grammar mask on every draw.

What it introduces: GenerationParams(grammar=...), a contract Grammar the harness compiles with
xgrammar (torchlet.grammar: a JSON schema, any JSON object, a regex, a choice, an EBNF grammar)
for the model's vocabulary. Every draw of a constrained request is taken among the tokens its
grammar allows after its tokens so far; once the grammar is complete, among its eos and stop
ids, which end it (with none, it finishes STOP; where the grammar allows no token at all, it
fails alone, naming its grammar).

Why v18 needs it: a program that calls the engine wants JSON it can parse, a choice from a
list, text that matches a pattern. Asking the model nicely gives that most of the time.

Core principle: the mask only removes. It applies to the logits before temperature and the
filters, so the race over p / E (v11) keeps its winner whenever the grammar allows it: every
constrained token is the oracle's (Hugging Face in float64) draw over the allowed tokens, greedy
and seeded, and wherever the unconstrained draw is allowed it is that draw. This holds whichever
way the engine draws: a prefill's first token, a decode step inside its graph, the rows of a
verifying pass (v17's guesses, each row masked after the guesses before it, the matcher rolled
back past the ones not kept), in order or with overlap. top-p is left out of the seeded cases:
its nucleus is taken over the allowed tokens' renormalised probabilities and may drop the
unconstrained winner (GenerationParams says so).

The fixtures have no tokenizer: spec/support/models/grammar_vocab.py spells each of their ids
(printable characters, JSON pieces, letter pairs), and the grammars are compiled over that.

Files to compare: implementations/v19_structured_output/sampler.py against
implementations/v17_speculative_decoding/sampler.py; grammar.py is new (the grammar part);
torchlet/grammar.py is the harness's compiler.

Tradeoff left visible: a decode launched ahead (v14) draws before the host has the token its
masks follow, so it draws unmasked, and the constrained rows are drawn again from its logits
once the host has read the step before (its masks filled while the GPU computes the launch):
a few more kernels a step, after the graph. A decode step run in order (overlap off) replays
graphs of its own (the "masked" variants, greedy and sampling), one more set a bucket. With
tensor parallelism each rank gets the compiled grammar (it pickles) and keeps its own matchers
over the same tokens. `torchlet bench structured` measures the cost: the fills are hidden
while a step's host work stays within the GPU's step; past that the step waits for them. On an
H100 (docs/benchmarks.md, "on the GPU"): 1.03x at batch 1, 1.26x at 8, 2.39x at 64, where a
step's host work outlasts the GPU's 1.26 ms step (docs/perf-notes.md).
"""
from __future__ import annotations

import functools
import json
import re

import jsonschema
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from spec.support.collection import exports, trees
from spec.support.collection.hypothesis_profiles import engine_settings
from spec.support.models.fixtures import tiny_checkpoint
from spec.support.models.grammar_vocab import pieces, spell
from spec.support.oracles import sampling_oracle as oracle
from spec.support.oracles.oracle import cached_model, greedy
from spec.support.oracles.prompts import MARGIN
from spec.support.watchers.op_trace import op_trace
from torchlet.contract import (STRUCTURED_OUTPUT, FinishReason, GenerationParams, RequestError,
                               RequestState, bitmask_words)
from torchlet.grammar import Compiler, Constraint

pytestmark = pytest.mark.spec(needs=STRUCTURED_OUTPUT)

FIXTURE = "tiny_qwen2"
CKPT = tiny_checkpoint(FIXTURE)
VOCAB = CKPT.config.vocab_size
EOS = 2
PIECES = pieces(VOCAB)
PROMPT = [40, 41, 42, 43]
NEIGHBOUR = [7, 8, 9, 10, 11]  # an unconstrained request beside the constrained ones
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                           "age": {"type": "integer", "minimum": 0,
                                                   "maximum": 120},
                                           "tags": {"type": "array", "maxItems": 2,
                                                    "items": {"enum": ["a", "bc", "yes"]}}},
          "required": ["name", "age"]}
CONSTRAINTS = {
    "schema": Constraint.json_schema(SCHEMA),
    "regex": Constraint.regex(r"(ab|cd)[0-9]{2,4}-[a-z]{1,3}x"),  # bounded: a random model ends it
    "choice": Constraint.choice(["yes", "no", "maybe later"]),
}
SAMPLED = dict(temperature=0.9, top_k=40, min_p=0.02)  # no top_p: see the page


@functools.lru_cache(maxsize=None)
def compiler() -> Compiler:
    return Compiler.for_vocabulary(PIECES, [EOS])


def grammar(name: str):
    return compiler().compile(CONSTRAINTS[name])


def params_for(mode: str, g, seed: int = 7, **more) -> GenerationParams:
    sampled = SAMPLED if mode == "seeded" else {}
    return GenerationParams(max_new_tokens=60, eos_token_ids=(EOS,), grammar=g,
                            seed=seed if sampled else None, **sampled, **more)


def allowed_by(matcher) -> torch.Tensor:
    """The spec's own reading of a bitmask: token t allowed when bit t % 32 of word t // 32 is
    set, a boolean [VOCAB]."""
    words = torch.zeros(bitmask_words(VOCAB), dtype=torch.int32)
    matcher.fill(words)
    return torch.tensor([bool((int(words[t // 32]) >> (t % 32)) & 1) for t in range(VOCAB)])


@functools.lru_cache(maxsize=None)
def golden(name: str, mode: str, prompt: tuple = tuple(PROMPT), seed: int = 7):
    """The oracle's constrained tokens: float64 logits masked by a fresh matcher of the grammar,
    then the argmax or the contract's race, up to the end of the answer or the first draw a
    float32 engine could take otherwise. With them, at each position, the unconstrained draw
    and whether the grammar allowed it."""
    model, g = cached_model(FIXTURE), grammar(name)
    params = params_for(mode, g, seed)
    matcher, seq, tokens, free = g.matcher((EOS,)), list(prompt), [], []
    settings = oracle.Settings(params.temperature, params.top_k, params.top_p, params.min_p)
    with torch.inference_mode():
        while len(tokens) < params.max_new_tokens:
            logits = model(torch.tensor([seq])).logits[0, -1].double()
            allowed = allowed_by(matcher)
            masked = logits.masked_fill(~allowed, float("-inf"))
            if mode == "greedy":
                top2 = masked.topk(2).values
                if not top2[0] - top2[1] >= MARGIN:
                    break
                token, unconstrained = int(masked.argmax()), int(logits.argmax())
            else:
                if not oracle.stable(masked, settings, seed, len(seq)):
                    break
                token = oracle.draw(masked, settings, seed, len(seq))
                unconstrained = oracle.draw(logits, settings, seed, len(seq))
            tokens.append(token)
            free.append((unconstrained, bool(allowed[unconstrained])))
            if token == EOS:
                break
            assert matcher.accept(token)
            seq.append(token)
    return tokens, free


def run(engine, requests):
    """(prompt, params) pairs added at once, stepped to the end: each one's RequestOutput."""
    ids = [engine.add_request(list(p), params) for p, params in requests]
    while engine.has_unfinished():
        engine.step()
    return [engine.output(i) for i in ids]


# --- without a grammar, v18 ------------------------------------------------------------------


def test_without_a_grammar_it_runs_the_previous_versions_ops_one_for_one(impl):
    """What lets the earlier pages skip this version (spec/support/collection/rule.py): a
    request without a grammar, a prompt and three draws, dispatches the ops of the version
    before it, in order, with the same shapes, and gets its tokens; sampled too."""
    source = exports.asked_source(impl)
    before = next(v for v in trees.versions(exports.tree_of(impl)) if v.name == source)

    def trace(version):
        engine = version.build(CKPT)
        return op_trace(lambda: engine.generate([PROMPT, NEIGHBOUR], GenerationParams(
            max_new_tokens=3)) + engine.generate([PROMPT], GenerationParams(
                max_new_tokens=3, seed=3, temperature=0.8)))

    assert trace(impl) == trace(before)


# --- the mask only removes -------------------------------------------------------------------


class Guessing:
    """A proposer whose guesses the grammar allows: the oracle's next tokens (right), or at each
    guessed position the smallest allowed token that is not the oracle's (wrong, so the pass
    rejects it and the matcher must be rolled back past it)."""

    def __init__(self, name: str, mode: str, how: str):
        self.name, self.mode, self.how = name, mode, how

    def propose(self, requests, k):
        out = []
        for r in requests:
            if r.params.grammar is None:  # the unconstrained neighbour: no guesses
                out.append([])
                continue
            gold, _ = golden(self.name, self.mode)
            made = len(r.tokens)
            right = [t for t in gold[made:made + k] if t != EOS]
            if self.how == "wrong":
                matcher = r.params.grammar.matcher((EOS,))
                for t in r.tokens:
                    matcher.accept(t)
                wrong = []
                for t in right:
                    allowed = allowed_by(matcher).nonzero().flatten().tolist()
                    others = [a for a in allowed if a != t and a != EOS]
                    if not others or not matcher.accept(others[0]):
                        break
                    wrong.append(others[0])
                right = wrong
            out.append(right)
        return out


CONFIGS = {
    "overlap": {},
    "in order": dict(overlap=False, use_graphs=False),
    "ngram k=2": dict(speculative_tokens=2, min_tokens_per_pass=0.0),
}
GUESSING = ("right k=4", "wrong k=3")
CASES = [("schema", "greedy"), ("schema", "seeded"), ("regex", "seeded"), ("choice", "greedy")]


@pytest.mark.parametrize("config", list(CONFIGS) + list(GUESSING))
@pytest.mark.parametrize("name, mode", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_constrained_tokens_are_the_oracles_draws_over_the_allowed_tokens(impl, name, mode,
                                                                          config):
    """Against the oracle's masked draws, alone and beside an unconstrained request (whose
    tokens stay the oracle's own), with overlap, in order, and verifying guesses that are right
    or that the grammar allows but the draw rejects. Where the unconstrained draw is allowed,
    the constrained token is it."""
    gold, free = golden(name, mode)
    assert gold[-1] == EOS or len(gold) >= 6, "the oracle's horizon says too little: pick a prompt"
    if config in GUESSING:
        how, k = config.split(" k=")
        options = dict(speculative_tokens=int(k), min_tokens_per_pass=0.0,
                       proposer=Guessing(name, mode, how))
    else:
        options = CONFIGS[config]
    engine = impl.build(CKPT, **options)
    params = params_for(mode, grammar(name))
    neighbour = greedy(cached_model(FIXTURE), NEIGHBOUR, 8, stop_below=MARGIN).tokens
    alone, = run(engine, [(PROMPT, params)])
    together = run(engine, [(NEIGHBOUR, GenerationParams(max_new_tokens=len(neighbour))),
                            (PROMPT, params)])
    for out in (alone, together[1]):
        assert out.tokens[:len(gold)] == gold
        for token, (unconstrained, allowed) in zip(out.tokens, free):
            assert token == unconstrained or not allowed
    assert together[0].tokens == neighbour
    assert any(not ok for _, ok in free), "the mask should refuse an unconstrained draw"


@pytest.mark.parametrize("mode", ["greedy", "seeded"])
def test_with_overlap_a_constrained_decode_is_launched_ahead_and_drawn_again_once_read(impl,
                                                                                      mode):
    """v14's overlap kept beside a grammar: after every step that leaves the constrained
    request running, the engine has already computed each token it knows (its next decode
    was launched before the step's tokens were read back, as v14's are), and still its tokens
    are the oracle's draws over the allowed tokens (the launch drew without the masks; the
    constrained rows were drawn again from its logits once the host had the token)."""
    gold, _ = golden("schema", mode)
    engine = impl.build(CKPT)
    neighbour = greedy(cached_model(FIXTURE), NEIGHBOUR, 8, stop_below=MARGIN).tokens
    ids = [engine.add_request(list(NEIGHBOUR), GenerationParams(max_new_tokens=len(neighbour))),
           engine.add_request(list(PROMPT), params_for(mode, grammar("schema")))]
    ahead = []
    while engine.has_unfinished():
        engine.step()
        out = engine.output(ids[1])
        if out.state is RequestState.RUNNING:
            ahead.append(engine.num_cached_tokens(ids[1]) == len(out.prompt) + len(out.tokens))
    assert out.tokens[:len(gold)] == gold
    assert engine.output(ids[0]).tokens == neighbour
    assert len(ahead) >= 3 and all(ahead), ahead


# --- every answer parses ---------------------------------------------------------------------


def leaves():
    return st.one_of(
        st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
                  st.integers(-50, 50), st.integers(0, 500)),
        st.builds(lambda lo, span: {"type": "number", "minimum": lo, "maximum": lo + span},
                  st.integers(-10, 10), st.integers(1, 20)),
        st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 4)),
        st.sampled_from([{"type": "boolean"}, {"type": "null"}]),
        st.lists(st.one_of(st.integers(-5, 5), st.sampled_from(["a", "bc", "yes", "no"])),
                 min_size=1, max_size=3, unique=True).map(lambda v: {"enum": v}),
    )


def objects(inner):
    names = st.sampled_from(["a", "b", "id", "ok"])
    return st.dictionaries(names, inner, min_size=1, max_size=3).flatmap(
        lambda props: st.lists(st.sampled_from(sorted(props)), unique=True).map(
            lambda required: {"type": "object", "properties": props, "required": required}))


def arrays(inner):
    return st.builds(lambda items, n: {"type": "array", "items": items, "maxItems": n},
                     inner, st.integers(0, 2))


SCHEMAS = st.recursive(leaves(), lambda inner: st.one_of(objects(inner), arrays(inner)),
                       max_leaves=4)


def test_every_answer_parses_and_validates_against_its_drawn_schema(impl):
    """Schemas drawn by Hypothesis (objects with optional fields, arrays, enums, bounded
    integers and numbers, strings, nested), a greedy and a seeded request each, beside an
    unconstrained one: each constrained answer ends at eos, parses, and jsonschema accepts it;
    the unconstrained one gets the oracle's tokens."""
    engine = impl.build(CKPT)
    neighbour = greedy(cached_model(FIXTURE), NEIGHBOUR, 6, stop_below=MARGIN).tokens

    @engine_settings()
    @given(schema=SCHEMAS, seed=st.integers(0, 2 ** 32), prompt=st.lists(
        st.integers(3, VOCAB - 1), min_size=1, max_size=6))
    def check(schema, seed, prompt):
        g = compiler().compile(Constraint.json_schema(schema))
        greedy_params = GenerationParams(max_new_tokens=120, eos_token_ids=(EOS,), grammar=g)
        seeded = GenerationParams(max_new_tokens=120, eos_token_ids=(EOS,), grammar=g,
                                  temperature=1.0, seed=seed)
        outs = run(engine, [(prompt, greedy_params), (NEIGHBOUR, GenerationParams(
            max_new_tokens=len(neighbour))), (prompt, seeded)])
        assert outs[1].tokens == neighbour
        for out in (outs[0], outs[2]):
            assert out.finish_reason is FinishReason.EOS, (schema, spell(out.tokens, PIECES))
            jsonschema.validate(json.loads(spell(out.tokens, PIECES, (EOS,))), schema)

    check()


@pytest.mark.parametrize("mode", ["greedy", "seeded"])
def test_regex_and_choice_answers_match(impl, mode):
    engine = impl.build(CKPT, speculative_tokens=2, min_tokens_per_pass=0.0)
    for seed in range(3):
        outs = run(engine, [([5 + seed, 6], params_for(mode, grammar("regex"), seed)),
                            ([9, 8 + seed], params_for(mode, grammar("choice"), seed))])
        assert all(o.finish_reason is FinishReason.EOS for o in outs)
        regex, choice = (spell(o.tokens, PIECES, (EOS,)) for o in outs)
        assert re.fullmatch(CONSTRAINTS["regex"].value, regex), regex
        assert choice in CONSTRAINTS["choice"].value


# --- ends and refusals -----------------------------------------------------------------------


def test_a_grammar_that_cannot_go_on_fails_its_request_alone_naming_it(impl):
    """"ab" then a character no token spells: after two tokens the grammar allows nothing. That
    request fails (ERROR, its grammar named) and gives its blocks back; the others get their
    tokens."""
    dead = compiler().compile(Constraint.regex("ab\u20ac"))
    engine = impl.build(CKPT)
    used = engine.pool_stats()["num_used"]
    neighbour = greedy(cached_model(FIXTURE), NEIGHBOUR, 6, stop_below=MARGIN).tokens
    outs = run(engine, [(PROMPT, GenerationParams(max_new_tokens=20, eos_token_ids=(EOS,),
                                                  grammar=dead)),
                        (NEIGHBOUR, GenerationParams(max_new_tokens=len(neighbour))),
                        (PROMPT, params_for("greedy", grammar("choice")))])
    assert outs[0].finish_reason is FinishReason.ERROR
    assert "grammar" in outs[0].error and "regex" in outs[0].error
    assert spell(outs[0].tokens, PIECES) == "ab"
    assert outs[1].tokens == neighbour
    assert spell(outs[2].tokens, PIECES, (EOS,)) in CONSTRAINTS["choice"].value
    assert engine.pool_stats()["num_used"] == used


def test_a_complete_grammar_with_no_stop_id_to_end_on_finishes_the_request(impl):
    """ignore_eos and no stop ids: once the choice is spelled the grammar allows nothing more,
    and the request finishes (STOP) on the choice alone."""
    out, = run(impl.build(CKPT), [(PROMPT, GenerationParams(
        max_new_tokens=40, eos_token_ids=(EOS,), ignore_eos=True, grammar=grammar("choice")))])
    assert out.finish_reason is FinishReason.STOP
    assert spell(out.tokens, PIECES) in CONSTRAINTS["choice"].value


@pytest.mark.parametrize("bad, named", [
    ({"type": "object"}, "compiled Grammar"),
    ("[0-9]+", "compiled Grammar"),
    (Compiler.for_vocabulary(pieces(VOCAB + 32), [EOS]).compile(Constraint.regex("a+")),
     "vocabulary of 544"),
])
def test_a_grammar_not_compiled_for_this_model_is_refused_and_nothing_is_queued(impl, bad, named):
    engine = impl.build(CKPT)
    with pytest.raises(RequestError) as refused:
        engine.add_request(PROMPT, GenerationParams(grammar=bad))
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert not engine.has_unfinished()


# --- the default model ------------------------------------------------------------------------

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0,
                                                   "maximum": 120},
                                           "city": {"enum": ["Paris", "Rome", "Oslo"]}},
          "required": ["name", "age", "city"]}


@pytest.mark.real_model
def test_on_the_default_model_json_answers_validate_and_a_choice_is_made(impl):
    """SmolLM2-135M-Instruct as the CLI hands it (its GGUF blocks), its own tokenizer's
    vocabulary: a chat prompt asking for a person as JSON gets an answer jsonschema accepts,
    greedy and seeded; a yes/no question under a choice answers one of them."""
    from spec.support.models import real_model as rm
    from torchlet.engines import build_sized

    tokenizer = rm.tokenizer()
    ckpt = rm.stored_checkpoint()
    eos = tuple(ckpt.config.eos_token_ids)
    compiler = Compiler.for_tokenizer(tokenizer, ckpt.config.vocab_size, eos)
    prompts = [list(rm.chat_ids("Describe a person as JSON with a name, an age and a city."))]
    engine = build_sized(impl, ckpt, max_model_len=max(map(len, prompts)) + 64, max_running=4,
                         use_graphs=False)
    person = compiler.compile(Constraint.json_schema(PERSON))
    outs = run(engine, [(p, GenerationParams(max_new_tokens=60, eos_token_ids=eos, grammar=person,
                                             **mode))
                        for p in prompts for mode in ({}, dict(temperature=0.8, seed=5))])
    for out in outs:
        assert out.finish_reason is FinishReason.EOS
        jsonschema.validate(json.loads(tokenizer.decode(out.tokens[:-1])), PERSON)
    choice = compiler.compile(Constraint.choice(["yes", "no"]))
    out, = run(engine, [(list(rm.chat_ids("Is Paris in France? Answer yes or no.")),
                         GenerationParams(max_new_tokens=8, eos_token_ids=eos, grammar=choice))])
    assert tokenizer.decode(out.tokens[:-1]) in ("yes", "no")


# --- on a GPU ----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["overlap", "ngram k=2"])
@pytest.mark.parametrize("name, mode", [("schema", "greedy"), ("schema", "seeded")])
def test_on_cuda_the_masked_graphs_replay_and_draw_the_oracles_tokens(impl, name, mode, config):
    """float32 on CUDA, the layers' kernels and the decode graphs captured: a constrained decode
    step asks the driver for a graph launch (the masked graphs, the mask read on the device), and
    the tokens are the oracle's draws over the allowed tokens, beside an unconstrained request."""
    from spec.support.watchers.replay_watch import CudaLaunches
    gold, _ = golden(name, mode)
    engine = impl.build(CKPT, device="cuda", **CONFIGS[config])
    params = params_for(mode, grammar(name))
    neighbour = greedy(cached_model(FIXTURE), NEIGHBOUR, 8, stop_below=MARGIN).tokens
    ids = [engine.add_request(list(NEIGHBOUR), GenerationParams(max_new_tokens=len(neighbour))),
           engine.add_request(list(PROMPT), params)]
    launches = []
    while engine.has_unfinished():
        with CudaLaunches() as seen:
            engine.step()
        launches.append(seen.graphs)
    assert engine.output(ids[1]).tokens[:len(gold)] == gold
    assert engine.output(ids[0]).tokens == neighbour
    assert sum(n >= 1 for n in launches) >= len(gold) // 2, launches
