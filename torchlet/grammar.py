"""Constraints written as text, compiled into the contract's Grammar over a model's token ids,
with xgrammar: a JSON schema, any JSON object, a regex, a choice among strings, or an EBNF
grammar. The engine (v19) sees only torchlet.contract's Grammar and GrammarMatcher; the
tokenizer's vocabulary, the grammar engine and the text live here.

    compiler = Compiler.for_tokenizer(tokenizer, vocab_size=config.vocab_size)
    grammar = compiler.compile(Constraint.json_schema({"type": "object", ...}))
    engine.add_request(prompt, GenerationParams(grammar=grammar, eos_token_ids=eos))

A constraint compiles once per compiler: the compiler keeps its grammars by constraint (and
xgrammar its own cache beneath). A schema or a regex it cannot take is a RequestError with the
grammar engine's own message; a schema keyword it would not enforce is refused by name.

A model's vocabulary may be larger than its tokenizer's (rows padded for the GPU's sake:
Qwen2.5's 151,936 for 151,665 tokens; the GPU bench's stand-in 151,936 for a byte tokenizer).
xgrammar is told the tokenizer's own size: ids past it, which no text spells, would be
"special" tokens to it, and its accept_token slows with their number (on this CPU 18.5 us an
accept with 102,784 of them, 1.1 us with none: docs/probes/grammar_padding.py), which at 64
constrained requests is more host time a step than a GPU's decode step. The matcher writes the
padding's bits itself: never allowed, never accepted."""
from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from torchlet.contract import RequestError, bitmask_words

KINDS = ("json_schema", "json_object", "regex", "choice", "grammar")

# Keywords of a JSON schema that xgrammar's converter enforces (its json_schema_converter), and
# the annotations that constrain nothing. Any other keyword would be accepted and ignored (an
# answer could break it and still be made), so it is refused by name.
ENFORCED = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "$defs",
    "definitions", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "maxLength", "pattern", "format", "minProperties", "maxProperties",
}
ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
               "deprecated", "readOnly", "writeOnly"}
# Keywords whose value is a map of names to schemas, a list of schemas, or a schema.
SCHEMA_MAPS = {"properties", "$defs", "definitions"}
SCHEMA_LISTS = {"anyOf", "oneOf", "allOf", "prefixItems"}
SCHEMA_ONE = {"items", "additionalProperties"}
CACHED = 64  # grammars a compiler keeps


@dataclass(frozen=True)
class Constraint:
    """What a request's answer must match, as text: kind one of KINDS, value the schema (as
    canonical JSON), the regex, the choices (a tuple) or the EBNF source."""

    kind: str
    value: Any = None

    @classmethod
    def json_schema(cls, schema: dict | str) -> "Constraint":
        try:
            parsed = json.loads(schema) if isinstance(schema, str) else schema
            text = json.dumps(parsed)  # property order kept: the answer follows it
        except (TypeError, ValueError) as e:
            raise RequestError(f"invalid JSON schema: {e}") from None
        if not isinstance(parsed, dict):
            raise RequestError(f"a JSON schema is an object, got {type(parsed).__name__}")
        check_keywords(parsed)
        return cls("json_schema", text)

    @classmethod
    def json_object(cls) -> "Constraint":
        return cls("json_object")

    @classmethod
    def regex(cls, pattern: str) -> "Constraint":
        if not isinstance(pattern, str) or not pattern:
            raise RequestError(f"a regex is a non-empty string, got {pattern!r}")
        return cls("regex", pattern)

    @classmethod
    def choice(cls, choices: Sequence[str]) -> "Constraint":
        if isinstance(choices, str) or not choices or \
                not all(isinstance(c, str) and c for c in choices):
            raise RequestError(f"a choice is a list of non-empty strings, got {choices!r}")
        return cls("choice", tuple(choices))

    @classmethod
    def grammar(cls, ebnf: str) -> "Constraint":
        if not isinstance(ebnf, str) or not ebnf.strip():
            raise RequestError(f"an EBNF grammar is a non-empty string, got {ebnf!r}")
        return cls("grammar", ebnf)

    def describe(self) -> str:
        value = self.value if self.kind != "choice" else "|".join(self.value)
        text = "" if value is None else f" {value}"
        return f"{self.kind}{text if len(text) <= 60 else text[:57] + '...'}"


def check_keywords(schema: Any, where: str = "#") -> None:
    """Refuse, naming it and where it is, a keyword xgrammar would not enforce."""
    if not isinstance(schema, dict):
        return  # true/false schemas, or a malformed one xgrammar names
    for key, value in schema.items():
        if key not in ENFORCED and key not in ANNOTATIONS:
            raise RequestError(f"JSON schema keyword {key!r} (at {where}) is not supported: "
                               f"structured output would not enforce it")
        if key in SCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                check_keywords(sub, f"{where}/{key}/{name}")
        elif key in SCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                check_keywords(sub, f"{where}/{key}/{i}")
        elif key in SCHEMA_ONE:
            check_keywords(value, f"{where}/{key}")


def engine_message(error: Exception) -> str:
    """xgrammar's message without its log prefix ("[08:09:26] /project/cpp/x.cc:94: ")."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return re.sub(r"^\[[\d:]+\] \S+:\d+: (Check failed: \(.*?\) is false: )?", "", text)


class Matcher:
    """GrammarMatcher over xgrammar's matcher, whose vocabulary is the tokenizer's `spelled`
    ids: the model's ids past them are never allowed (see the module)."""

    def __init__(self, matcher, spelled: int):
        self.xgr, self.spelled = matcher, spelled
        self.words = bitmask_words(spelled)  # xgrammar's row; the model's may be longer

    def fill(self, bitmask: torch.Tensor) -> None:
        # through numpy views of the host row: xgrammar takes any DLPack array, and a numpy
        # view costs a fraction of a tensor's (1.4 against 3.3 us a fill on this CPU)
        words = bitmask.numpy()
        self.xgr.fill_next_token_bitmask(words[:self.words].reshape(1, -1))
        if self.spelled % 32:  # xgrammar sets the last word's bits past its vocabulary
            words[self.words - 1] &= (1 << self.spelled % 32) - 1
        if len(words) > self.words:
            words[self.words:] = 0

    def accept(self, token: int) -> bool:
        return int(token) < self.spelled and bool(self.xgr.accept_token(int(token)))

    def rollback(self, count: int) -> None:
        if count:
            self.xgr.rollback(count)

    def completed(self) -> bool:
        return bool(self.xgr.is_completed())


class Grammar:
    """The contract's Grammar: one compiled constraint for one vocabulary. Pickled as its
    serialized form (v16's ranks each get their own copy)."""

    def __init__(self, compiled, vocab_size: int, description: str):
        self.compiled, self.vocab_size, self.description = compiled, vocab_size, description

    def matcher(self, stop_token_ids: Sequence[int]):
        import xgrammar as xgr
        stops = [int(t) for t in stop_token_ids]
        return Matcher(xgr.GrammarMatcher(self.compiled, override_stop_tokens=stops or None,
                                          terminate_without_stop_token=not stops),
                       self.compiled.tokenizer_info.vocab_size)

    def __reduce__(self):
        info = self.compiled.tokenizer_info
        return (_rebuild, (self.compiled.serialize_json(), info.serialize_json(),
                           self.vocab_size, self.description))

    def __repr__(self) -> str:
        return f"Grammar({self.description})"


def _rebuild(compiled: str, info: str, vocab_size: int, description: str) -> Grammar:
    import xgrammar as xgr
    tokenizer_info = xgr.TokenizerInfo.deserialize_json(info)
    return Grammar(xgr.CompiledGrammar.deserialize_json(compiled, tokenizer_info), vocab_size,
                   description)


class Compiler:
    """Compiles constraints for one vocabulary, each once (the last CACHED kept)."""

    def __init__(self, tokenizer_info, vocab_size: int):
        import xgrammar as xgr
        self.info, self.vocab_size = tokenizer_info, vocab_size
        self.xgr = xgr.GrammarCompiler(tokenizer_info)
        self.cache: OrderedDict[Constraint, Grammar] = OrderedDict()

    @classmethod
    def for_tokenizer(cls, tokenizer, vocab_size: int,
                      stop_token_ids: Sequence[int] = ()) -> "Compiler":
        """A Hugging Face tokenizer's vocabulary, in a model of vocab_size ids: xgrammar gets the
        tokenizer's own ids (at most vocab_size), the matchers the rest (see the module)."""
        import xgrammar as xgr
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=min(len(tokenizer), vocab_size),
            stop_token_ids=list(stop_token_ids) or None)
        return cls(info, vocab_size)

    @classmethod
    def for_vocabulary(cls, pieces: Sequence[bytes], stop_token_ids: Sequence[int]) -> "Compiler":
        """A vocabulary given as each token's bytes (b"" for a special token, never allowed but
        as a stop): how the specs give the tiny fixtures, which have no tokenizer, a grammar."""
        import xgrammar as xgr
        info = xgr.TokenizerInfo(list(pieces), xgr.VocabType.RAW, vocab_size=len(pieces),
                                 stop_token_ids=list(stop_token_ids))
        return cls(info, len(pieces))

    def compile(self, constraint: Constraint) -> Grammar:
        """The constraint's Grammar; RequestError with xgrammar's message where it refuses."""
        grammar = self.cache.get(constraint)
        if grammar is None:
            grammar = Grammar(self._compiled(constraint), self.vocab_size, constraint.describe())
            self.cache[constraint] = grammar
            if len(self.cache) > CACHED:
                self.cache.popitem(last=False)
        self.cache.move_to_end(constraint)
        return grammar

    def _compiled(self, constraint: Constraint):
        kind, value = constraint.kind, constraint.value
        try:
            if kind == "json_schema":
                return self.xgr.compile_json_schema(value, any_whitespace=False, strict_mode=True)
            if kind == "json_object":
                # any object (strict_mode=False: properties of any name), no whitespace runs
                return self.xgr.compile_json_schema('{"type": "object"}', any_whitespace=False,
                                                    strict_mode=False)
            if kind == "regex":
                return self.xgr.compile_regex(value)
            if kind == "choice":
                return self.xgr.compile_grammar("root ::= " + " | ".join(map(ebnf_string, value)))
            if kind == "grammar":
                return self.xgr.compile_grammar(value)
        except RuntimeError as e:
            raise RequestError(f"invalid {kind}: {engine_message(e)}") from None
        raise RequestError(f"unknown constraint kind {kind!r}: one of {', '.join(KINDS)}")


def ebnf_string(text: str) -> str:
    """A string literal of xgrammar's EBNF for exactly this text: quotes, backslashes and
    control characters escaped, the rest as it is."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
