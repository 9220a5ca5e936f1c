"""`torchlet chat`: a conversation with the model, one answer streamed per line typed.

Each turn sends the whole conversation again (system prompt, every question and answer so far,
then the new question) through the model's chat template, so an answer can build on the ones
before. The engine is the one `torchlet generate` builds (torchlet/generate.py's Runner), with
the same flags, --tensor-parallel among them (run_on_ranks); it is rebuilt larger only when the
conversation outgrows it. /reset forgets the conversation (the system prompt stays), /exit or
end of input (Ctrl-D) ends the chat.

Ctrl-C during an answer stops it after the token being made, and the answer as far as it went
stays in the conversation, as in llama.cpp's CLI (Ollama drops it and keeps the question): what
the screen shows is what the model is sent. A second Ctrl-C before it stops ends the chat, as
Ctrl-C ends generate: one step (a long prompt's prefill) can take minutes. Ctrl-C at the prompt
never ends the chat, as in Ollama (llama.cpp quits): it says to use Ctrl-D or /exit, since the
second of two Ctrl-Cs pressed to stop an answer often lands at the prompt.

An answer gets at most --max-new-tokens, capped to what the context leaves; one that reaches the
context's end says so, and a question that leaves no room for an answer is not sent: one line
says so and points at /reset.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading

HELP = "[/reset starts the conversation over, /exit or Ctrl-D ends the chat]"
AT_PROMPT = "[Ctrl-D or /exit ends the chat]"  # what Ctrl-C at the prompt says
STOPPED = "[stopped: the answer so far stays in the conversation]"


def add_commands(subparsers) -> None:
    from torchlet.generate import add_run_args

    p = subparsers.add_parser("chat", help="a conversation with the model, streamed turn by turn",
                              description="Type a message and Enter; each answer sees the whole "
                                          "conversation. " + HELP.strip("[]") + ".")
    p.add_argument("--system", default=None, help="a system prompt, sent first in every turn")
    add_run_args(p)
    p.set_defaults(run=run_chat)


def read_line(prompt: str) -> str | None:
    """The next line typed, None at the end of input. The prompt is shown on a terminal only,
    so that a chat fed through a pipe prints its answers alone. Ctrl-C drops the line being
    typed and says how to leave."""
    while True:
        try:
            return input(prompt if sys.stdin.isatty() else "")
        except EOFError:
            return None
        except KeyboardInterrupt:
            print(f"\n{AT_PROMPT}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def ctrl_c_stops_the_answer():
    """Yields an Event that a first Ctrl-C sets; the answer checks it after each token, so it
    stops between two steps, where the engine aborts the request cleanly (a KeyboardInterrupt
    could land halfway through a step's bookkeeping). A second Ctrl-C before that raises
    KeyboardInterrupt, which ends the chat."""
    pressed = threading.Event()

    def on_ctrl_c(signum, frame):
        if pressed.is_set():
            raise KeyboardInterrupt
        pressed.set()

    before = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, before)


def run_chat(args) -> int:
    from torchlet.generate import run_on_ranks
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
    if runner.asked is not None and runner.asked > runner.context:
        print(f"[--max-new-tokens {runner.asked} is more than the model's context of "
              f"{runner.context} tokens: answers stop where it ends]", file=sys.stderr, flush=True)
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
        if runner.limit(len(ids)) < 1:
            print(f"[the conversation no longer fits the model's context: {len(ids)} tokens with "
                  f"this question, {runner.context} in all, no room for an answer; /reset starts "
                  f"over]", file=sys.stderr, flush=True)
            continue
        with ctrl_c_stops_the_answer() as pressed:
            answer, _ = runner.answer(ids, stop=pressed.is_set)
        if pressed.is_set():
            print(STOPPED, file=sys.stderr, flush=True)
        conversation = turn + [{"role": "assistant", "content": answer}]
    if line is None and sys.stdin.isatty():
        print()  # Ctrl-D leaves the cursor after the prompt
    return 0
