"""`torchlet chat`: a conversation with the model, one answer streamed per line typed.

Each turn sends the whole conversation again (system prompt, every question and answer so far,
then the new question) through the model's chat template, so an answer can build on the ones
before. The engine is the one `torchlet generate` builds (cli.Runner), with the same flags,
--tensor-parallel among them (cli.run_on_ranks); it is rebuilt larger only when the
conversation outgrows it. /reset forgets the conversation (the system prompt stays), /exit or
end of input (Ctrl-D) ends the chat, Ctrl-C ends it as it ends generate. A question that would
take the conversation past the model's context is not sent: one line says so and points at
/reset.
"""
from __future__ import annotations

import sys

HELP = "[/reset starts the conversation over, /exit or Ctrl-D ends the chat]"


def add_commands(subparsers) -> None:
    from torchlet.cli import add_run_args

    p = subparsers.add_parser("chat", help="a conversation with the model, streamed turn by turn",
                              description="Type a message and Enter; each answer sees the whole "
                                          "conversation. " + HELP.strip("[]") + ".")
    p.add_argument("--system", default=None, help="a system prompt, sent first in every turn")
    add_run_args(p)
    p.set_defaults(run=run_chat)


def read_line(prompt: str) -> str | None:
    """The next line typed, None at the end of input. The prompt is shown on a terminal only,
    so that a chat fed through a pipe prints its answers alone."""
    try:
        return input(prompt if sys.stdin.isatty() else "")
    except EOFError:
        return None


def run_chat(args) -> int:
    from torchlet.cli import run_on_ranks
    from torchlet.contract import TorchletError

    if args.system is not None and not args.system.strip():
        raise TorchletError("--system is empty (leave it out for no system prompt)")
    return run_on_ranks(args, lambda runner: converse(runner, args.system),
                        check=require_chat_template)


def require_chat_template(runner) -> None:
    from torchlet.contract import TorchletError
    from torchlet.text import has_chat_template

    if not has_chat_template(runner.tokenizer):
        raise TorchletError(f"{runner.model_name}'s tokenizer has no chat template, which a chat "
                            f"needs (torchlet generate --no-chat sends a prompt as it is)")


def converse(runner, system: str | None) -> int:
    """The chat itself, on rank 0: read a line, answer it, until /exit or the end of input."""
    from torchlet.text import prompt_ids

    if sys.stdin.isatty():
        try:
            import readline  # noqa: F401  line editing and history for input()
        except ImportError:
            pass
    print(runner.banner(), file=sys.stderr)
    print(HELP, file=sys.stderr, flush=True)
    start = [{"role": "system", "content": system}] if system is not None else []
    conversation = list(start)
    while (line := read_line("> ")) is not None:
        line = line.strip()
        if line == "/exit":
            break
        if line == "/reset":
            conversation = list(start)
            print("[a new conversation]", file=sys.stderr, flush=True)
            continue
        if line.startswith("/"):
            print(f"[unknown command {line.split()[0]}] {HELP}", file=sys.stderr, flush=True)
            continue
        if not line:
            continue
        turn = conversation + [{"role": "user", "content": line}]
        ids = prompt_ids(runner.tokenizer, turn)
        if len(ids) + runner.params.max_new_tokens > runner.context:
            print(f"[the conversation no longer fits the model's context: {len(ids)} tokens with "
                  f"this question, {runner.params.max_new_tokens} more for the answer, "
                  f"{runner.context} in all; /reset starts over]", file=sys.stderr, flush=True)
            continue
        answer, _ = runner.answer(ids)
        conversation = turn + [{"role": "assistant", "content": answer}]
    if line is None and sys.stdin.isatty():
        print()  # Ctrl-D leaves the cursor after the prompt
    return 0
