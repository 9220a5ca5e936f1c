"""The `torchlet` command: the parser and main(), nothing a command does. Each subcommand
(generate, chat, benchmarks, the learner's workflow, the docs site, the model cache, a version's
parts, serve) registers itself through `add_commands(subparsers)` in its own module; what
several of them share lies below them (torchlet/running.py: device, dtype, threads, which
version; torchlet/generate.py: the Runner generate and chat answer with). No module of the
harness imports this one: it is the entry point (`torchlet`, `python -m torchlet`).

Every failure the user can cause (a bad argument, a missing directory, Ctrl-C at any moment) ends
in one line on stderr and a non-zero exit, never a traceback; a reader that closes the pipe early
(`| head -2`) ends any command quietly, with status 141. That is why this module imports
only the standard library at its top: torch and the harness are imported inside main(), where a
Ctrl-C during those slow imports is caught like any other."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys

PLUGINS = ("torchlet.generate", "torchlet.bench", "torchlet.learner", "torchlet.docs",
           "torchlet.cache", "torchlet.chat", "torchlet.parts", "torchlet.serve")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchlet", description="Torchlet: an LLM inference runtime taught in small versions.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in PLUGINS:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).add_commands(subparsers)
    return parser


# What a shell reports for a program that SIGPIPE ended (128 + 13), as `yes | head -1` does:
# a reader that left early is not a success (`set -o pipefail` sees the output was not all read),
# nor a failure worth a word.
CLOSED_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe also shows at the last flush
        return code
    except KeyboardInterrupt:  # at any moment: during the imports, the model load, the stream
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()
        print("\ntorchlet: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # whichever command wrote: `torchlet generate ... | head -2`
        quiet_stdout()
        return CLOSED_PIPE


def quiet_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered for the closed pipe would fail again at
    the interpreter's exit ("Exception ignored ... BrokenPipeError", exit status 120)."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # main() called in-process with stdout captured: no descriptor
        pass


def _main(argv: list[str] | None) -> int:
    import torch

    from torchlet.contract import TorchletError, UnknownVersionError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return 2
    threads = torch.get_num_threads()
    try:
        return args.run(args) or 0
    except UnknownVersionError as e:
        print(f"torchlet: error: {e}", file=sys.stderr)
        return 2
    except TorchletError as e:
        print(f"torchlet: error: {e}", file=sys.stderr)
        return 1
    finally:  # set_threads is process-wide: main() called in-process (the specs) gives it back
        torch.set_num_threads(threads)


def exit_process() -> None:
    """Run main() as the process and leave with its status. A rank that torchrun started skips
    the interpreter's teardown once its process group is destroyed and its output flushed: at
    teardown, under load, rank 0 aborted now and then after printing its answer ("terminate
    called without an active exception", SIGABRT, twice in the suite's torchrun spec over two
    sessions), from a thread of the collective backend left to a C++ destructor."""
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    exit_process()
