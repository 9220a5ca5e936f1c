"""`--json-schema FILE`, `--regex R`, `--choice a,b,c` on generate and chat: every answer
constrained to the schema, the pattern or one of the choices (v19, structured output).

What it checks: generate's answer validates against the schema (`jsonschema`), matches the
regex as a whole, or is one of the choices, and its banner says what constrains it; chat
constrains each answer of the conversation. Without --impl the newest version with the
capability runs, whatever the weights. Two flags at once, a missing or non-JSON schema file,
an unsupported keyword, a schema or regex the compiler refuses, an empty choice and a version
without the capability (named with --impl) are each refused in one line that names the flag,
with no traceback and no answer.

Core principle: the model is a tiny random Llama (ascii_chat_dir) that never writes JSON or a
pattern of its own accord: what parses, parses because the grammar masked every draw.

Files: torchlet/structured_flags.py (the flags, checked before the model loads, and compiled
after the tokenizer), torchlet/generate.py (Runner: the version, the grammar in every answer's
params, the banner).
"""
from __future__ import annotations

import io
import json
import re

import jsonschema
import pytest

import implementations
from spec.support.models.hf_dirs import ascii_chat_dir
from spec.test_cli import assert_one_line, run
from torchlet.contract import STRUCTURED_OUTPUT

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 5},
                                           "age": {"type": "integer", "minimum": 0,
                                                   "maximum": 120}},
          "required": ["name", "age"]}  # bounded: a random model ends it
REGEX = r"(ab|cd)[0-9]{2,4}-[a-z]{1,3}x"
CHOICES = ["red", "green", "blue"]


def newest_constraining() -> str:
    """The version generate picks for a constraint when --impl is left out."""
    return [v.name for v in implementations.discover()
            if STRUCTURED_OUTPUT in v.capabilities][-1]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return str(ascii_chat_dir(tmp_path_factory.mktemp("structured_cli_model")))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Schema files: a good one, one of a keyword xgrammar would not enforce, one it refuses,
    one that is not JSON."""
    where = tmp_path_factory.mktemp("schemas")
    texts = {"good": json.dumps(SCHEMA),
             "unsupported": json.dumps({"type": "string", "not": {"const": "a"}}),
             "refused": json.dumps({"type": "nonsense"}), "not json": "{type: object"}
    paths = {}
    for i, (name, text) in enumerate(texts.items()):
        paths[name] = where / f"schema{i}.json"
        paths[name].write_text(text)
    paths["missing"] = where / "none.json"
    return {name: str(p) for name, p in paths.items()}


def generate(capsys, model, *flags):
    return run(capsys, "generate", "Hello", "--model", model, "--max-new-tokens", "64", *flags)


def test_json_schema_answers_json_that_validates(capsys, model, files):
    code, out, err = generate(capsys, model, "--json-schema", files["good"])
    assert code == 0, err
    jsonschema.validate(json.loads(out), SCHEMA)
    banner = err.splitlines()[0]
    assert banner.startswith(f"[{newest_constraining()}") and \
        "answers constrained to json_schema {" in banner, banner


def test_regex_answers_a_whole_match(capsys, model):
    code, out, err = generate(capsys, model, "--regex", REGEX)
    assert code == 0, err
    assert re.fullmatch(REGEX, out.rstrip("\n")), out


def test_choice_answers_one_of_the_choices_in_chat_every_turn(capsys, model, monkeypatch):
    code, out, err = generate(capsys, model, "--choice", ",".join(CHOICES))
    assert code == 0, err
    assert out.rstrip("\n") in CHOICES
    monkeypatch.setattr("sys.stdin", io.StringIO("Pick a colour.\nAnother one?\n"))
    code, out, err = run(capsys, "chat", "--model", model, "--choice", ",".join(CHOICES))
    assert code == 0, err
    answers = out.splitlines()
    assert len(answers) == 2 and all(a in CHOICES for a in answers), out


REFUSED = {
    "two flags": (("--regex", "a+", "--choice", "a,b"),
                  "--regex and --choice: give one of --json-schema, --regex, --choice"),
    "a missing file": (("--json-schema", "{missing}"),
                       "--json-schema {missing}: No such file or directory"),
    "a file not JSON": (("--json-schema", "{not json}"),
                        "--json-schema {not json}: invalid JSON schema: Expecting property "
                        "name enclosed in double quotes"),
    "an unsupported keyword": (("--json-schema", "{unsupported}"),
                               "--json-schema {unsupported}: JSON schema keyword 'not' (at #) "
                               "is not supported"),
    "a schema refused": (("--json-schema", "{refused}"),
                         '--json-schema {refused}: invalid json_schema: Unsupported type '
                         '"nonsense"'),
    "a regex refused": (("--regex", "[a-"), "--regex [a-: invalid regex: Regex parsing error"),
    "an empty choice": (("--choice", "a,,b"), "--choice a,,b: a choice is a list of non-empty "
                                              "strings"),
    "a version without it": (("--impl", "v18", "--regex", "a+"),
                             "v18_quantized_weights does not constrain its answers: --regex a+ "
                             "needs a version with the structured_output capability"),
}


# chat refuses through the same Runner: two of its cases, one before the model loads, one after
@pytest.mark.parametrize("case, command", [(case, "generate") for case in REFUSED]
                         + [("two flags", "chat"), ("a regex refused", "chat")])
def test_a_mistake_is_refused_in_one_line_naming_the_flag(capsys, model, files, case, command):
    flags, message = REFUSED[case]
    flags = [f.format(**files) for f in flags]
    prompt = ["Hello"] if command == "generate" else []
    code, out, err = run(capsys, command, *prompt, "--model", model, *flags)
    line = assert_one_line(code, err.encode(), "torchlet: error: ")
    assert line.startswith("torchlet: error: " + message.format(**files)), line
    assert out == ""
