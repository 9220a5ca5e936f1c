"""generate's and chat's structured output flags: `--json-schema FILE`, `--regex R`,
`--choice a,b,c`, one at most. Each answer is then constrained to the schema, the pattern or one
of the choices (torchlet/grammar.py compiles it with xgrammar; v19 and later apply it).

What can be checked before the model loads is (one flag, a readable file holding JSON, a
schema of supported keywords, a non-empty regex or choice list); the compiler's own refusals (a
regex it cannot parse, a schema it rejects) need the tokenizer and come after it loads. Every
refusal is one line that starts with the flag.

Standard library only at the top, like torchlet/running.py: generate registers these flags."""
from __future__ import annotations

from pathlib import Path

FLAGS = ("json_schema", "regex", "choice")


def add_structured(p) -> None:
    s = p.add_argument_group("structured output (one of these; a version with "
                             "structured_output, v19 and later)")
    s.add_argument("--json-schema", default=None, metavar="FILE",
                   help="answer with JSON that validates against the JSON schema in FILE")
    s.add_argument("--regex", default=None, metavar="R",
                   help="answer with text that matches the regular expression R as a whole")
    s.add_argument("--choice", default=None, metavar="A,B,C",
                   help="answer with exactly one of the comma-separated choices")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def asked(args):
    """(the flag, its Constraint) for the one structured output flag given, None for none."""
    from torchlet.contract import RequestError, TorchletError
    from torchlet.grammar import Constraint

    given = [f for f in FLAGS if getattr(args, f, None) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise TorchletError(f"{' and '.join(map(flag, given))}: give one of --json-schema, "
                            f"--regex, --choice")
    name, value = given[0], getattr(args, given[0])
    where = f"{flag(name)} {value}"
    try:
        if name == "json_schema":
            try:
                text = Path(value).read_text(encoding="utf-8")
            except OSError as e:
                raise TorchletError(f"{where}: {e.strerror or e}") from None
            except UnicodeDecodeError:
                raise TorchletError(f"{where}: not UTF-8 text") from None
            return where, Constraint.json_schema(text)
        if name == "regex":
            return where, Constraint.regex(value)
        return where, Constraint.choice(value.split(","))
    except RequestError as e:
        raise TorchletError(f"{where}: {e}") from None


def compiled(where: str, constraint, tokenizer, vocab_size: int, stop_ids):
    """The constraint's Grammar for the model's vocabulary; one line where it does not
    compile."""
    from torchlet.contract import RequestError, TorchletError
    from torchlet.grammar import Compiler

    try:
        return Compiler.for_tokenizer(tokenizer, vocab_size, stop_ids).compile(constraint)
    except RequestError as e:
        raise TorchletError(f"{where}: {e}") from None
