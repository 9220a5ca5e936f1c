"""Where and how a version runs on this machine, for every command that runs one (generate,
chat, serve, the benchmarks, the tensor-parallel ranks): the device and dtype, torch's CPU
threads, which version runs by default, the serving options a CPU needs, and whether Triton
kernels run or take their PyTorch path.

Standard library only at the top, like torchlet/cli.py: torch, the contract and the versions are
imported by the functions that need them, so a command's flags parse before anything slow loads."""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

DTYPES = ("auto", "float32", "bfloat16", "float16")
# The device kinds the versions are written and specified for. Others torch knows fail deep in
# a run: meta holds no data (the first .item() raised), mps and xla are untried.
DEVICES = ("cpu", "cuda")
# v17's acceptance option's values (its sampler's ACCEPTANCE), as --acceptance offers them
ACCEPTANCE = ("exact", "rejection")
# --proposer's words for v17's proposers that are not a draft model's path
NGRAM, SELF_DRAFT = "ngram", "self:"


def resolve_device(name: str | None) -> str:
    import torch

    from torchlet.contract import TorchletError

    if name is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(name).type
    except RuntimeError:  # torch's message lists twenty kinds, the ones Torchlet runs on among them
        kind = None
    if kind not in DEVICES:
        raise TorchletError(f"--device {name}: not a device Torchlet runs on (cpu, cuda, cuda:N)")
    if kind == "cuda" and not torch.cuda.is_available():
        raise TorchletError(f"--device {name}: this machine has no CUDA GPU (try --device cpu)")
    return name


def default_version(versions, device: str, quantized: bool = False):
    """On a GPU, the newest version. On a CPU, the newest whose cache is not paged: for the main
    job, one request, the gathers through block tables cost a CPU more than paging saves
    (`torchlet bench main-job --versions v05,v06,v07,v08` on the 2-core CPU machine, 2026-12-01:
    v07 35.4 tokens/s, v08 32.1, v13 30.8, Hugging Face 33.2); unless the weights are quantized
    (`quantized`: a GGUF model, or --quantize) and a version reads them as stored, which reads
    a fraction of the bytes a token (QUANTIZED_WHY). It serves with its CPU graph stand-in off
    (serving_options). Flags that need a later capability (sampling) pick the newest version
    that has it (pick_version)."""
    from torchlet.contract import PAGED_KV, QUANTIZED_WEIGHTS, UnknownVersionError

    if not versions:
        raise UnknownVersionError(f"no version to run on {device}")
    if not device.startswith("cuda"):
        reading = [v for v in versions if QUANTIZED_WEIGHTS in v.capabilities]
        if quantized and reading:
            return reading[-1]
        contiguous = [v for v in versions if PAGED_KV not in v.capabilities]
        if contiguous:
            return contiguous[-1]
    return versions[-1]


def pick_version(name: str | None, root: str | None, device: str, need=None,
                 interpret: bool = False, quantized: bool = False):
    """The version --impl names, else the default for the device; with `need` (a capability the
    flags ask for, e.g. sampling) and no --impl, the newest version that has it. interpret: on a
    CPU, run Triton kernels in the interpreter (slow; the specs' way)."""
    if interpret and not device.startswith("cuda"):
        # must be set before any @triton.jit runs, i.e. before versions are imported
        os.environ["TRITON_INTERPRET"] = "1"
    import implementations

    from torchlet.contract import UnknownVersionError

    root = (existing_dir(root, "--impl-root") if root is not None
            else implementations.REFERENCE_ROOT)
    if name is not None:  # --impl "" is a mistake to report, not a request for the default
        return implementations.load(name, root)
    implementations.require_versions(root)
    needs = (need,) if isinstance(need, str) else tuple(need or ())
    if needs:
        able = [v for v in implementations.discover(root)
                if all(n in v.capabilities for n in needs)]
        if not able:
            raise UnknownVersionError(f"no version under {root} has the "
                                      f"{' and '.join(needs)} capabilit"
                                      f"{'y' if len(needs) == 1 else 'ies'}")
        return able[-1]
    return default_version(implementations.discover(root), device, quantized)


# Why a CPU run of quantized weights defaults to the version that reads them (the banner's words)
QUANTIZED_WHY = "chosen for them: it reads them as stored, the fewest bytes a token"
QUANTIZE = ("int8", "int4")


def quantized_model(args) -> bool:
    """Whether the run's weights are quantized: --quantize, or a GGUF model (the default one
    is), whose blocks the model cache keeps as they are."""
    model = getattr(args, "model", None)
    return bool(getattr(args, "quantize", None)) or model is None or str(model).endswith(".gguf")


def holds_blocks(checkpoint) -> bool:
    from torchlet.contract import QuantizedTensor

    return any(isinstance(t, QuantizedTensor) for t in checkpoint.tensors.values())


def for_floats(version, args, device: str, checkpoint, need=()):
    """The version picked by default for a quantized model (quantized_model: a GGUF file) where
    the file held float weights after all (F32 or F16 tensors) and no --quantize asks for
    integers: the default for float weights. A version --impl named, or one picked for a
    capability the flags need (the newest with it, whatever the weights), stays."""
    from torchlet.contract import QUANTIZED_WEIGHTS

    if (getattr(args, "impl", None) is None and not need and not getattr(args, "quantize", None)
            and QUANTIZED_WEIGHTS in version.capabilities and not holds_blocks(checkpoint)):
        return pick_version(None, getattr(args, "impl_root", None), device)
    return version


def quantize_options(args, version) -> dict:
    """--quantize int8|int4 as the version's weights option ({} without it); a version without
    the quantized_weights capability (named with --impl) is refused in one line. With
    --batch-invariant, whose products read float matrices, a version that reads quantized blocks
    holds them as floats (weights="float"), and --quantize is refused."""
    from torchlet.contract import QUANTIZED_WEIGHTS, TorchletError

    fmt = getattr(args, "quantize", None)
    if getattr(args, "batch_invariant", False):
        if fmt:
            raise TorchletError(f"--batch-invariant multiplies float matrices: leave out "
                                f"--quantize {fmt}")
        return {"weights": "float"} if QUANTIZED_WEIGHTS in version.capabilities else {}
    if not fmt:
        return {}
    if QUANTIZED_WEIGHTS not in version.capabilities:
        raise TorchletError(f"{version.name} holds float weights: --quantize {fmt} needs a "
                            f"version with the {QUANTIZED_WEIGHTS} capability (v18 and later), "
                            f"or leave --impl out")
    return {"weights": fmt}


def add_quantize(p) -> None:
    p.add_argument("--quantize", choices=QUANTIZE, default=None,
                   help="hold the weights as int8 (per output channel) or int4 (groups of 32 "
                        "with a minimum), quantized at load (v18 and later; default: as the "
                        "model stores them, the GGUF file's own blocks for the default model)")


def weights_label(version, checkpoint, options: dict) -> str:
    """The banner's words for how the weights are held ("" for a version of float weights)."""
    from torchlet.contract import QUANTIZED_WEIGHTS, QuantizedTensor

    if QUANTIZED_WEIGHTS not in version.capabilities:
        return ""
    fmt = options.get("weights")
    if fmt == "float":
        return "weights dequantized to floats at load" if holds_blocks(checkpoint) else \
            "float weights"
    if fmt:
        return f"weights {fmt}, quantized at load"
    if not holds_blocks(checkpoint):
        return "float weights"
    kinds = sorted({t.name for t in checkpoint.tensors.values() if isinstance(t, QuantizedTensor)})
    return f"weights {'/'.join(kinds)} as stored"


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
def triton_interpret(value: str | None):
    """TRITON_INTERPRET set to value ("0": layers on their PyTorch path, "1": kernels under the
    interpreter; None: as it is) inside the block, and put back after. An engine reads it when
    it is built, so build it inside."""
    before = os.environ.get("TRITON_INTERPRET")
    if value is not None:
        os.environ["TRITON_INTERPRET"] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


def kernels_off(device: str, interpret: bool):
    """On a CPU, Triton layers take their PyTorch path unless --triton-interpret asks for the
    interpreter. An engine chooses when it is built (it reads TRITON_INTERPRET then), so build
    and run it inside this block."""
    return triton_interpret(None if device.startswith("cuda") or interpret else "0")


def run_mode(version, device: str, options: dict, interpret: bool, proposer: str = "") -> str:
    """How the version runs here, for the banner; proposer: what guesses, when it is not the
    n-gram lookup (load_proposer's label)."""
    mode = []
    if version.uses_triton and not device.startswith("cuda"):
        mode.append("Triton kernels in the interpreter" if interpret else
                    "Triton kernels off (PyTorch layers)")
    if options.get("use_graphs") is False:
        mode.append("graphs off")
    if options.get("overlap") is False:
        mode.append("steps in order")
    if options.get("speculative_tokens"):
        mode.append(f"up to {options['speculative_tokens']} guesses a step, "
                    f"{options.get('acceptance', 'exact')} acceptance")
        if proposer:
            mode.append(proposer)
    return "".join(f", {m}" for m in mode)


def speculation_needs(args) -> tuple[str, ...]:
    """The capability --speculate K asks of a version picked by default: none for K = 0."""
    return ("speculative",) if args.speculate > 0 else ()


def speculation_options(args, version) -> dict:
    """--speculate K, --acceptance and --batch-invariant as the version's build options (for
    K = 0 batch_invariant alone, or {}; the proposer is load_proposer's, once the model is
    loaded). Refused in one line: a negative K, --acceptance rejection or --proposer without
    --speculate (they would be ignored), a version without the speculative capability (one
    named with --impl, for --speculate or --batch-invariant), and a self:N that is no number
    of layers."""
    from torchlet.contract import SPECULATIVE, TorchletError

    k = args.speculate
    if k < 0:
        raise TorchletError(f"--speculate must be at least 0, got {k}")
    invariant = {"batch_invariant": True} if args.batch_invariant else {}
    if invariant and SPECULATIVE not in version.capabilities:
        raise TorchletError(f"{version.name} has no batch-invariant mode: --batch-invariant needs "
                            f"v17 or later")
    if invariant and not resolve_device(args.device).startswith("cuda") \
            and not getattr(args, "triton_interpret", False):
        raise TorchletError("--batch-invariant runs on the Triton kernels: on a GPU (on a CPU "
                            "only under --triton-interpret, float32, minutes a token of the "
                            "default model)")
    if k == 0:
        for flag, value, default in (("--acceptance", args.acceptance, ACCEPTANCE[0]),
                                     ("--proposer", args.proposer, None)):
            if value != default:
                raise TorchletError(f"{flag} {value} needs --speculate above 0: without it "
                                    f"nothing is guessed")
        return invariant
    self_draft_layers(args.proposer or NGRAM)  # a mistyped self:N, before the model loads
    if SPECULATIVE not in version.capabilities:
        raise TorchletError(f"{version.name} does not speculate: --speculate {k} needs a version "
                            f"with the {SPECULATIVE} capability (v17 and later), or leave --impl "
                            f"out")
    return {"speculative_tokens": k, "acceptance": args.acceptance} | invariant


def self_draft_layers(text: str, flag: str = "--proposer") -> int | None:
    """N of --proposer self:N (None for another proposer); one line if N is not a whole number
    of at least 1 (the most it may be is known once the model is loaded)."""
    from torchlet.contract import TorchletError

    if not text.startswith(SELF_DRAFT):
        return None
    number = text.removeprefix(SELF_DRAFT)
    if not number.lstrip("-").isdigit() or int(number) < 1:
        raise TorchletError(f"{flag} {text}: self:N takes the target's first N layers as its "
                            f"draft, N at least 1 (e.g. self:8)")
    return int(number)


def load_proposer(text: str | None, target, flag: str = "--proposer") -> tuple[object, str]:
    """What --proposer names, as (v17's `proposer` build option, the banner's words for it, ""
    for ngram): ngram (also when not given) as it is; self:N the target checkpoint's first N
    layers (checkpoints.self_draft); anything else a draft model, a directory or .gguf file
    found and loaded as --model is. A draft of another vocabulary is refused here, in one line
    naming both sizes: v17's build refuses it too, but generate and chat build their engine
    after the banner (chat only at the first question)."""
    from torchlet.checkpoints import load_hf_dir, self_draft
    from torchlet.contract import CheckpointError, TorchletError
    from torchlet.gguf_model import resolve_model

    text = text or NGRAM
    if text == NGRAM:
        return NGRAM, ""
    layers = self_draft_layers(text, flag)
    if layers is not None:
        try:
            draft = self_draft(target, layers)
        except CheckpointError as e:
            raise TorchletError(f"{flag} {text}: {e}") from None
        return draft, f"self-draft: first {layers} layer{'' if layers == 1 else 's'}"
    path, name = resolve_model(text, progress=True, flag=flag)
    draft = load_hf_dir(path)
    mine, theirs = draft.config.vocab_size, target.config.vocab_size
    if mine != theirs:
        raise TorchletError(f"{flag} {text}: the draft's vocabulary ({mine} tokens) is not the "
                            f"target's ({theirs}): a draft must share the target's tokenizer")
    return draft, f"draft: {name}"


def add_speculate(p) -> None:
    """--speculate, --acceptance and --proposer, for generate, chat and serve."""
    p.add_argument("--speculate", type=int, default=0, metavar="K",
                   help="guess up to K tokens a step from earlier text and verify them in one "
                        "pass (v17 and later; default: 0, off)")
    p.add_argument("--acceptance", choices=ACCEPTANCE, default=ACCEPTANCE[0],
                   help="with --speculate: exact keeps the tokens of a run without it (in "
                        "float32, or with --batch-invariant; in bfloat16 a near-tie may "
                        "differ), rejection only their distribution (default: exact)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="every row's numbers the same bits in any batch (v17 and later, on a "
                        "GPU): --speculate's exact tokens in bfloat16 too, a request's tokens "
                        "the same alone or among others; slower steps")
    p.add_argument("--proposer", default=None, metavar="ngram|PATH|self:N",
                   help="with --speculate, what guesses: ngram, prompt lookup in the request's "
                        "own text (default); PATH, a draft model (a directory or .gguf file, as "
                        "--model) with the target's vocabulary; self:N, the target's own first N "
                        "layers")


def resolve_dtype(name: str, device: str):
    import torch

    if name == "auto":
        name = "bfloat16" if device.startswith("cuda") else "float32"
    return getattr(torch, name)



def existing_dir(path: str | Path, what: str, hint: str = "") -> Path:
    """The directory `path`, resolved; a TorchletError naming `what` if it is none."""
    from torchlet.contract import TorchletError

    path = Path(path)
    if not path.is_dir():
        kind = "a file, not a directory" if path.exists() else "does not exist"
        raise TorchletError(f"{what} {path}: {kind}{hint}")
    return path.resolve()


def usable_cores() -> int:
    """The cores this process may run on (a cpuset or taskset may leave it fewer than the
    machine has)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def default_threads() -> tuple[int, str]:
    """Torch's CPU threads when --threads is not given, and why, for the banner: the cores this
    process may use that the 1-minute load average does not already keep busy, at least 1.
    Torch's own default takes every core; on a busy machine its threads then wait on each other
    (SmolLM2 decoded about 10x slower with 2 than with 1 on the 2-core machine under load)."""
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # neither exists on every platform
        load = 0.0
    return max(1, min(cores, round(cores - load))), f"{cores} cores, load {load:.1f}"


def set_threads(n: int | None) -> str:
    """Sets torch's CPU threads to n, or to default_threads() when None; returns what the banner
    says. generate, chat and bench main-job call it, so the benchmark runs as generate does."""
    import torch

    from torchlet.contract import TorchletError

    if n is not None and n < 1:
        raise TorchletError(f"--threads must be at least 1, got {n}")
    if n is not None and n > usable_cores():  # taken, as asked, but it only slows the run down
        print(f"torchlet: warning: --threads {n} is more than the {usable_cores()} cores this "
              f"process may use: the threads past them only wait their turn", file=sys.stderr)
    why = ""
    if n is None:
        n, why = default_threads()
        why = f" ({why})"
    torch.set_num_threads(n)
    return f"{n} thread{'' if n == 1 else 's'}{why}"


def add_threads(p) -> None:
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: the cores that the 1-minute load average "
                        "leaves free, at least 1)")

