"""Page contract: a constraint written as text becomes a Grammar over token ids in the harness
(torchlet/grammar.py, xgrammar), or a one-line refusal; a version without structured_output
refuses a grammar.

What it shows: a JSON schema, a regex or an EBNF grammar the grammar engine cannot take is a
RequestError carrying the engine's own message, in one line; a schema keyword it would accept
and not enforce is refused by name (an answer could break it). A constraint compiles once per
compiler. A Grammar pickles (v16's ranks each get one) into one that masks alike. Before v19 an
engine refuses a request with a grammar when it is added, naming the capability, and queues
nothing: its draws would ignore it.

Files to compare: torchlet/grammar.py; torchlet/contract/values.py (check_request)."""
from __future__ import annotations

import pickle

import pytest
import torch

from spec.support.models.fixtures import tiny_checkpoint
from spec.support.models.grammar_vocab import pieces
from torchlet.contract import (GENERATE, STRUCTURED_OUTPUT, GenerationParams, RequestError,
                               bitmask_words)
from torchlet.grammar import Compiler, Constraint

CKPT = tiny_checkpoint("tiny_llama")
VOCAB = CKPT.config.vocab_size
EOS = 2
COMPILER = Compiler.for_vocabulary(pieces(VOCAB), [EOS])


@pytest.mark.parametrize("make, named", [
    (lambda: Constraint.json_schema({"type": 5}), "Type should be a string"),
    (lambda: Constraint.json_schema('{"type": "object",'), "invalid JSON schema"),
    (lambda: Constraint.json_schema([1, 2]), "a JSON schema is an object"),
    (lambda: Constraint.json_schema({"properties": {"a": {"patternProperties": {}}}}),
     "'patternProperties' (at #/properties/a)"),
    (lambda: Constraint.regex("[a-"), "Unclosed '['"),
    (lambda: Constraint.grammar("root ::= "), "EBNF parser error"),
    (lambda: Constraint.choice([]), "a choice is a list of non-empty strings"),
])
def test_a_constraint_the_grammar_engine_cannot_take_is_refused_in_one_line(make, named):
    with pytest.raises(RequestError) as refused:
        COMPILER.compile(make())
    assert named in str(refused.value) and "\n" not in str(refused.value)


def masks(grammar, tokens) -> list[list[int]]:
    """The bitmask after each prefix of tokens, as lists of words."""
    matcher, out = grammar.matcher((EOS,)), []
    words = torch.zeros(bitmask_words(VOCAB), dtype=torch.int32)
    for token in list(tokens) + [None]:
        matcher.fill(words)
        out.append(words.tolist())
        if token is not None:
            assert matcher.accept(token)
    return out


def test_a_constraint_compiles_once_and_a_pickled_grammar_masks_alike():
    constraint = Constraint.json_schema({"type": "object", "properties": {
        "ok": {"type": "boolean"}}, "required": ["ok"]})
    grammar = COMPILER.compile(constraint)
    assert COMPILER.compile(Constraint.json_schema({"type": "object", "properties": {
        "ok": {"type": "boolean"}}, "required": ["ok"]})) is grammar
    table = pieces(VOCAB)
    answer = [table.index(p) for p in (b'{"', b"o", b"k", b'": ', b"true", b"}")]
    copy = pickle.loads(pickle.dumps(grammar))
    assert masks(copy, answer) == masks(grammar, answer)
    assert masks(grammar, answer)[0] != masks(grammar, answer)[3]  # the masks do change


def test_a_model_vocabulary_past_the_tokenizers_is_never_allowed_nor_accepted():
    """A tokenizer of 259 ids in a model of 1,000 (rows padded, as Qwen2.5's 151,936 for its
    151,665 tokens): xgrammar is told the tokenizer's 259 ids, none of them special for
    padding's sake (padding ids slow its accept: docs/probes/grammar_padding.py), and the
    matcher writes the padding's bits itself: a row filled over a block that allowed every
    token allows none of ids 259..999, even where the grammar allows nearly any token, and an
    id past the tokenizer is refused without changing the matcher."""
    from spec.support.models.hf_dirs import byte_tokenizer

    tokenizer, model_vocab = byte_tokenizer(), 1000
    spelled = len(tokenizer)
    compiler = Compiler.for_tokenizer(tokenizer, model_vocab, (tokenizer.eos_token_id,))
    letter = tokenizer.convert_tokens_to_ids("a")
    # ".*" allows nearly every id, and xgrammar then sets its last word's bits past its ids
    for pattern in ("[a-z]+", ".*"):
        grammar = compiler.compile(Constraint.regex(pattern))
        info = grammar.compiled.tokenizer_info
        assert info.vocab_size == spelled
        assert all(t < spelled for t in info.special_token_ids)
        matcher = grammar.matcher((tokenizer.eos_token_id,))
        row = torch.full((bitmask_words(model_vocab),), -1, dtype=torch.int32)
        matcher.fill(row)
        allowed = [t for t in range(model_vocab) if (int(row[t // 32]) >> (t % 32)) & 1]
        assert letter in allowed and max(allowed) < spelled, (pattern, max(allowed))
        assert not matcher.accept(spelled) and not matcher.accept(model_vocab - 1)
        assert matcher.accept(letter)


@pytest.mark.spec(needs=GENERATE, part="loop", until=STRUCTURED_OUTPUT)
def test_a_version_without_structured_output_refuses_a_grammar_and_queues_nothing(impl):
    engine = impl.build(CKPT)
    grammar = COMPILER.compile(Constraint.regex("[a-z]+"))
    with pytest.raises(RequestError) as refused:
        engine.generate([[5, 6, 7]], GenerationParams(max_new_tokens=4, grammar=grammar))
    assert STRUCTURED_OUTPUT in str(refused.value) and "\n" not in str(refused.value)
    if hasattr(engine, "has_unfinished"):
        assert not engine.has_unfinished()
