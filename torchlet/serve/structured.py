"""Structured output over HTTP: the constraint a request asks for, and the server's one compiler.

A request names at most one constraint: OpenAI's `response_format` (`json_schema` with its
schema, or `json_object`), or one of vLLM's extensions `guided_json`, `guided_regex`,
`guided_choice`, `guided_grammar`. It is refused with a 400 that names the field (protocol's
ApiError) when it asks for two, when the version cannot apply a grammar (structured_output,
v19), or when the constraint is malformed or does not compile; the message is
torchlet/grammar.py's one line. Nothing is queued before it compiles.
"""
from __future__ import annotations

import threading

from torchlet.contract import RequestError
from torchlet.grammar import Compiler, Constraint
from torchlet.serve.protocol import ApiError, Common


def asked(request: Common) -> dict[str, object]:
    """What the request asks for, by the name a message gives it: {name: how to make its
    Constraint}. response_format "text" asks for nothing, as OpenAI's default."""
    found = {}
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_object":
        found["response_format json_object"] = Constraint.json_object
    if fmt is not None and fmt.type == "json_schema":
        found["response_format json_schema"] = lambda: Constraint.json_schema(schema_of(fmt))
    for name, make in (("guided_json", Constraint.json_schema),
                       ("guided_regex", Constraint.regex),
                       ("guided_choice", Constraint.choice),
                       ("guided_grammar", Constraint.grammar)):
        value = getattr(request, name)
        if value is not None:
            found[name] = lambda make=make, value=value: make(value)
    return found


def schema_of(fmt) -> dict:
    if fmt.json_schema is None or fmt.json_schema.schema_ is None:
        raise RequestError("a json_schema format needs its schema: {\"type\": \"json_schema\", "
                           "\"json_schema\": {\"name\": ..., \"schema\": {...}}}")
    return fmt.json_schema.schema_


def constraint(request: Common, version: str, structured: bool) -> tuple[str, Constraint] | None:
    """The request's constraint and the name it was asked by, None if it asks for none; an
    ApiError (400) for two at once, a version without the capability, or a malformed one."""
    found = asked(request)
    if not found:
        return None
    names = list(found)
    param = names[0].split()[0]
    if len(found) > 1:
        raise ApiError(400, f"{' and '.join(names)}: a request takes one constraint",
                       param=param)
    if not structured:
        raise ApiError(400, f"{names[0]}: {version} does not constrain its answers; structured "
                            f"output needs a server started with a version that has the "
                            f"structured_output capability (v19 and later)", param=param)
    try:
        return names[0], found[names[0]]()
    except RequestError as e:
        raise ApiError(400, f"{names[0]}: {e}", param=param) from None


class Grammars:
    """The server's one Compiler for its model's vocabulary, whose cache, keyed by the
    constraint, compiles each constraint once. Made at the first constrained request, not at
    start-up: reading the vocabulary (0.3 s for SmolLM2's 49,152 tokens) is paid only by a
    server that is asked for it. Handlers compile in threads (a large schema takes a while);
    the lock keeps the compiler's cache whole."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: tuple[int, ...]):
        self.tokenizer, self.vocab_size, self.stop_ids = tokenizer, vocab_size, stop_ids
        self.compiler: Compiler | None = None
        self.lock = threading.Lock()

    def compile(self, name: str, constraint: Constraint):
        """The constraint's Grammar; a 400 with the compiler's message where it refuses."""
        with self.lock:
            if self.compiler is None:
                self.compiler = Compiler.for_tokenizer(self.tokenizer, self.vocab_size,
                                                       self.stop_ids)
            try:
                return self.compiler.compile(constraint)
            except RequestError as e:
                raise ApiError(400, f"{name}: {e}", param=name.split()[0]) from None
