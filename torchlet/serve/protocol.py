"""What an OpenAI-style request asks for, checked before anything reaches the engine, and the
text a request's tokens become (stop strings included).

A refusal is an `ApiError`: its status (400 for a request that cannot be served as asked, 404
for an unknown model, 422 for a body of the wrong shape) and OpenAI's error body, so clients
raise their usual exceptions (openai.BadRequestError, NotFoundError, UnprocessableEntityError).
"""
from __future__ import annotations

import json
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from torchlet.contract import GenerationParams, RequestError, check_sampling

DEFAULT_MAX_TOKENS = 128  # torchlet generate's --max-new-tokens default


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (status, message, param,
                                                                      code, kind)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}


class Part(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: Union[str, list[Part]]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(
            p.text for p in self.content)


class StreamOptions(BaseModel):
    include_usage: bool = False


class JsonSchema(BaseModel):
    """OpenAI's response_format.json_schema. name and strict are taken and change nothing: the
    schema is always enforced (xgrammar's strict mode: no properties beyond those named)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    name: str | None = None
    # "schema" would shadow a BaseModel attribute: the field is schema_, read as "schema"
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchema | None = None


class Common(BaseModel):
    """The fields both endpoints take. Unknown fields are ignored, as OpenAI's clients send
    some (user, logprobs: null, ...). Greedy unless temperature is above 0, as the CLI."""

    model_config = ConfigDict(extra="ignore")
    model: str
    max_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    n: int = 1
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False  # vLLM's extension: the benchmark asks for exact lengths
    # structured output (torchlet/serve/structured.py): OpenAI's response_format, or one of
    # vLLM's extensions, which the openai client sends through extra_body
    response_format: ResponseFormat | None = None
    guided_json: Union[dict[str, Any], str, None] = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None


class ChatRequest(Common):
    messages: list[Message]
    max_completion_tokens: int | None = None


class CompletionRequest(Common):
    prompt: Union[str, list[int], list[str]]


def parse(raw: bytes, kind: type[Common]) -> Common:
    """The body as `kind`: 400 if it is not JSON, 422 if it has the wrong shape."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply") from None
    except ValueError as e:  # an integer past Python's 4,300-digit limit on int(str)
        raise ApiError(400, f"the request body holds a number too large to read: {e}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:  # JSON's \ud800 escapes read as lone surrogates, which no tokenizer can take
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(400, f"the request body holds invalid Unicode: a lone surrogate "
                            f"{e.object[e.start:e.end]!a}") from None
    except RecursionError:  # nested deeper than json.dumps goes, though loads took it
        raise ApiError(400, "the request body is nested too deeply") from None
    try:
        return kind.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ApiError(422, f"{where}: {first['msg']} ({e.error_count()} error(s) in the body)",
                       param=where) from None


def stops(request: Common) -> list[str]:
    found = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    if any(not s for s in found):
        raise ApiError(400, "a stop string must not be empty", param="stop")
    return found


def params(request: Common, prompt_len: int, context: int, eos_ids: tuple[int, ...],
           samples: bool, version: str) -> GenerationParams:
    """The engine's settings for a request whose prompt has prompt_len tokens, or an ApiError
    naming what cannot be served: n > 1, a setting out of range, sampling asked of a greedy
    version, a prompt plus max_tokens past the context."""
    if request.n != 1:
        raise ApiError(400, f"n={request.n}: only one choice per request is supported (n=1)",
                       param="n")
    room = context - prompt_len
    if room < 1:
        raise ApiError(400, f"the prompt has {prompt_len} tokens and the context holds "
                            f"{context}: no room for a token", param="messages",
                       code="context_length_exceeded")
    # the newer name wins when given; a 0 is refused, not taken for absent
    name = ("max_completion_tokens" if getattr(request, "max_completion_tokens", None)
            is not None else "max_tokens")
    asked = getattr(request, name)
    if asked is not None and asked < 1:
        raise ApiError(400, f"{name} must be at least 1, got {asked}", param=name)
    if asked is not None and asked > room:
        raise ApiError(400, f"prompt ({prompt_len} tokens) + {name} ({asked}) = "
                            f"{prompt_len + asked} exceeds the context of {context} tokens",
                       param=name, code="context_length_exceeded")
    settings = GenerationParams(
        max_new_tokens=asked or min(DEFAULT_MAX_TOKENS, room), eos_token_ids=eos_ids,
        ignore_eos=request.ignore_eos, temperature=request.temperature, top_k=request.top_k,
        top_p=request.top_p, min_p=request.min_p, seed=request.seed)
    try:
        check_sampling(settings)
    except RequestError as e:
        raise ApiError(400, str(e), param=str(e).split(" ", 1)[0]) from None
    if not settings.greedy and not samples:
        raise ApiError(400, f"temperature={request.temperature}: {version} decodes greedily; "
                            f"sampling needs a server started with a version that samples "
                            f"(v11 and later)", param="temperature")
    return settings


def prompt_of(request: Common, tokenizer, vocab_size: int) -> list[int]:
    """The prompt's token ids: the chat template over the messages, a completion's text as it
    is, or a completion's token ids."""
    from torchlet.text import has_chat_template, prompt_ids

    if isinstance(request, ChatRequest):
        if not request.messages:
            raise ApiError(400, "messages is empty", param="messages")
        if not has_chat_template(tokenizer):
            raise ApiError(400, "this model's tokenizer has no chat template: use "
                                "/v1/completions", param="messages")
        return prompt_ids(tokenizer, [{"role": m.role, "content": m.text()}
                                      for m in request.messages])
    prompt = request.prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt) and prompt:
        if len(prompt) > 1:
            raise ApiError(400, f"a batch of {len(prompt)} prompts: send one prompt per "
                                f"request", param="prompt")
        prompt = prompt[0]
    ids = prompt_ids(tokenizer, prompt, chat=False) if isinstance(prompt, str) else list(prompt)
    if not ids:
        raise ApiError(400, "the prompt is empty", param="prompt")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ApiError(400, f"token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}",
                       param="prompt")
    return ids


class StopText:
    """Text as it may be shown, given stop strings that can span tokens: it holds back the
    last (longest stop - 1) characters, which could begin a stop string, until the next text
    shows they do not. Once a stop string appears, the text ends before it."""

    def __init__(self, stops: list[str]):
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        self.pending += text
        hits = [i for s in self.stops if (i := self.pending.find(s)) >= 0]
        if hits:
            shown, self.pending, self.stopped = self.pending[:min(hits)], "", True
            return shown
        cut = len(self.pending) - self.hold
        if cut <= 0:
            return ""
        shown, self.pending = self.pending[:cut], self.pending[cut:]
        return shown

    def flush(self) -> str:
        shown, self.pending = self.pending, ""
        return shown


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}
