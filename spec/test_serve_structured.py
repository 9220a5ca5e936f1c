"""`torchlet serve`'s structured output: OpenAI's `response_format` (`json_schema`,
`json_object`) and vLLM's `guided_regex`, `guided_choice`, `guided_grammar` extras, through the
official `openai` package.

What it checks: a served v19 answers a json_schema request (and vLLM's guided_json) with JSON
that validates against the schema (`jsonschema`), a json_object request (streamed) with a JSON object, a choice with one of
the choices and a regex with a whole match, on both endpoints; a schema sent twice is compiled
once. A bad schema, regex or grammar, an unsupported schema keyword, two constraints at once, or
a version without the structured_output capability is answered with a 400 whose message is the
compiler's one line, queues nothing (the next request gets the next engine id), and the server
serves the next request.

Core principle: the model is serve's tiny random Llama (spec/support/models/hf_dirs.py
ascii_chat_dir), which never writes JSON or a pattern of its own accord: what parses, parses
because the grammar masked every draw.

Files: torchlet/serve/structured.py (the constraint a request names, the server's compiler),
torchlet/serve/protocol.py (the fields), torchlet/serve/app.py (compiled before it is queued).
"""
from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest

import implementations
from spec.test_serve import CONTEXT, build, plain, user
from spec.support.models.hf_dirs import ascii_chat_dir, byte_tokenizer
from spec.support.serve.serve_app import InProcess
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import REQUEST_STATES, STRUCTURED_OUTPUT

# bounded everywhere (string lengths, the integer, the array): a random model ends it
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                           "age": {"type": "integer", "minimum": 0,
                                                   "maximum": 120},
                                           "tags": {"type": "array", "maxItems": 2,
                                                    "items": {"enum": ["a", "bc", "yes"]}}},
          "required": ["name", "age"]}
REGEX = r"(ab|cd)[0-9]{2,4}-[a-z]{1,3}x"
CHOICES = ["red", "green", "blue"]
MAX = 80  # tokens: more than the longest answer SCHEMA allows, one character a token


@pytest.fixture(scope="module")
def versions(request):
    given = request.config.getoption("--impl-root")
    found = implementations.discover(given or implementations.REFERENCE_ROOT)
    able = [v for v in found if STRUCTURED_OUTPUT in v.capabilities]
    if not able:
        pytest.skip(f"no version has {STRUCTURED_OUTPUT}")
    without = [v for v in found if REQUEST_STATES in v.capabilities
               and STRUCTURED_OUTPUT not in v.capabilities]
    return able[-1], without[-1]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return ascii_chat_dir(tmp_path_factory.mktemp("structured_model"))


@pytest.fixture(scope="module")
def checkpoint(model):
    return load_hf_dir(model)


def start(version, checkpoint, model):
    return InProcess(build(version, checkpoint), version, byte_tokenizer(), checkpoint.config,
                     model.name, CONTEXT)


def client_of(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0,
                         http_client=plain())


@pytest.fixture(scope="module")
def server(versions, checkpoint, model):
    s = start(versions[0], checkpoint, model)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with client_of(server) as c:
        yield c


def chat(client, model, question="Tell me about yourself.", max_tokens=MAX, **kwargs):
    return client.chat.completions.create(model=model.name, messages=user(question),
                                          max_tokens=max_tokens, **kwargs)


def test_a_json_schema_response_format_answers_json_that_validates(server, client, model):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA,
                                                  "strict": True}}
    first = chat(client, model, "Who are you?", response_format=fmt).choices[0]
    # vLLM's guided_json, on the other endpoint: the same constraint
    second = client.completions.create(model=model.name, prompt="A person:", max_tokens=MAX,
                                       extra_body={"guided_json": SCHEMA}).choices[0]
    texts = [first.message.content, second.text]
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)
    assert first.finish_reason == second.finish_reason == "stop"
    assert texts[0] != texts[1], "two prompts, two answers: the schema shapes them, the model " \
                                 "fills them"
    cached = [c for c in server.served.grammars.compiler.cache if c.kind == "json_schema"]
    assert len(cached) == 1, "the same schema twice is compiled once"


def test_a_json_object_response_format_streams_a_json_object(client, model):
    chunks = list(chat(client, model, response_format={"type": "json_object"}, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert isinstance(json.loads(text), dict), text
    assert chunks[-1].choices[0].finish_reason == "stop"


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_guided_choice_answers_one_of_the_choices(client, model, endpoint):
    extra = {"guided_choice": CHOICES}
    if endpoint == "chat":
        text = chat(client, model, "Pick a colour.", extra_body=extra).choices[0].message.content
    else:
        text = client.completions.create(model=model.name, prompt="My favourite colour is",
                                         max_tokens=MAX, extra_body=extra).choices[0].text
    assert text in CHOICES


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_guided_regex_answers_a_whole_match(client, model, endpoint):
    extra = {"guided_regex": REGEX}
    if endpoint == "chat":
        text = chat(client, model, "A code, please.", extra_body=extra).choices[0].message.content
    else:
        text = client.completions.create(model=model.name, prompt="The code is", max_tokens=MAX,
                                         extra_body=extra).choices[0].text
    assert re.fullmatch(REGEX, text), text


def test_guided_grammar_answers_a_sentence_of_the_grammar(client, model):
    grammar = 'root ::= ("yes" | "no") ", " [a-z] [a-z] "."'
    text = chat(client, model, extra_body={"guided_grammar": grammar}).choices[0].message.content
    assert re.fullmatch(r"(yes|no), [a-z]{2}\.", text), text


BAD = {
    "an invalid schema": ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "nonsense"}}}}, "response_format",
        'response_format json_schema: invalid json_schema: Unsupported type "nonsense"'),
    "an unsupported keyword": ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "patternProperties": {"^a": {}}}}}},
        "response_format", "response_format json_schema: JSON schema keyword "
                           "'patternProperties' (at #) is not supported"),
    "a schema left out": ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x"}}}, "response_format",
        "response_format json_schema: a json_schema format needs its schema"),
    "an invalid regex": ({"guided_regex": "[a-"}, "guided_regex",
                         "guided_regex: invalid regex: Regex parsing error at position 4: "
                         "Unclosed '['"),
    "an invalid grammar": ({"guided_grammar": "root ::= foo"}, "guided_grammar",
                           'guided_grammar: invalid grammar: EBNF parser error at line 1, '
                           'column 10: Rule "foo" is not defined'),
    "an empty choice": ({"guided_choice": []}, "guided_choice",
                        "guided_choice: a choice is a list of non-empty strings"),
    "two at once": ({"guided_regex": "a+", "response_format": {"type": "json_object"}},
                    "response_format",
                    "response_format json_object and guided_regex: a request takes one "
                    "constraint"),
}


def request_id(raw) -> int:
    return int(raw.headers["x-torchlet-request-id"])


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_constraint_is_a_400_with_its_message_and_the_next_request_is_served(
        client, model, case):
    extra, param, message = BAD[case]
    ask = {"extra_body": {"guided_choice": CHOICES}}
    before = request_id(client.chat.completions.with_raw_response.create(
        model=model.name, messages=user("Hi."), max_tokens=MAX, **ask))
    with pytest.raises(openai.BadRequestError) as refused:
        chat(client, model, extra_body=extra)
    error = refused.value.response.json()["error"]
    assert error["message"].startswith(message) and "\n" not in error["message"], error
    assert error["param"] == param
    raw = client.chat.completions.with_raw_response.create(
        model=model.name, messages=user("Hi."), max_tokens=MAX, **ask)
    assert raw.parse().choices[0].message.content in CHOICES
    assert request_id(raw) == before + 1, "the refused request reached the engine"


def test_a_version_without_structured_output_refuses_a_constraint_with_400(
        versions, checkpoint, model):
    server = start(versions[1], checkpoint, model)
    try:
        with client_of(server) as client:
            with pytest.raises(openai.BadRequestError) as refused:
                chat(client, model, response_format={"type": "json_object"})
            message = refused.value.response.json()["error"]["message"]
            assert message == (f"response_format json_object: {versions[1].name} does not "
                               f"constrain its answers; structured output needs a server "
                               f"started with a version that has the structured_output "
                               f"capability (v19 and later)")
            assert chat(client, model, max_tokens=4).choices[0].message.content
    finally:
        server.stop()
