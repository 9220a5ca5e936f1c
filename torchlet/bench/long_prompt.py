"""`torchlet bench long-prompt`: a long prompt's first token, from the version `torchlet
generate` picks here and from Hugging Face `generate`, timed in one process.

The prompt is the first N tokens (default 5,000) of a text as the model's tokenizer reads it (by
default this checkout's README.md and docs/*.md, read in order and repeated as needed), with no
chat template: a document handed over whole. Both sides get the same ids and make one greedy
token, so what is timed is the call to that token: the prefill. Contenders are built as main-job
builds them (main_job.py), and the rounds alternate (HF, then the versions) after one untimed
warm-up on the prompt's last 64 ids, which a prefix cache cannot match against the prompt's
start. The first token ids must agree.
"""
from __future__ import annotations

import itertools
import statistics
from pathlib import Path

from torchlet.contract import TorchletError
from torchlet.running import for_floats, resolve_device, resolve_dtype, set_threads

from .drive import progress_bar
from .main_job import (HF, add_prefix_stats, contenders_for, interleave, load_model,
                       summarize, versions_of)

REPO = Path(__file__).resolve().parents[2]
WARMUP_TOKENS = 64


def default_text() -> tuple[str, str]:
    """(text, what it is): the checkout's own prose."""
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    files = [f for f in files if f.is_file()]
    if not files:
        raise TorchletError(f"no README.md or docs/*.md under {REPO}: name a text with --text")
    return "\n\n".join(f.read_text() for f in files), "README.md and docs/*.md"


def read_text(path: str) -> tuple[str, str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TorchletError(f"--text {path}: {getattr(e, 'strerror', None) or e}") from None
    if not text.strip():
        raise TorchletError(f"--text {path}: the file holds no text")
    return text, Path(path).name


def prompt_of(tokenizer, text: str, tokens: int) -> list[int]:
    """The first `tokens` ids of the text, read again from its start as often as needed."""
    ids = [int(t) for t in tokenizer.encode(text)]
    if not ids:
        raise TorchletError("the text gives no tokens")
    return list(itertools.islice(itertools.cycle(ids), tokens))


def check_args(args, max_position: int | None = None) -> None:
    if args.rounds < 1:
        raise TorchletError(f"--rounds must be at least 1, got {args.rounds}")
    if args.tokens < WARMUP_TOKENS + 1:
        raise TorchletError(f"--tokens must be at least {WARMUP_TOKENS + 1}, got {args.tokens}")
    if max_position is not None and args.tokens + 1 > max_position:
        raise TorchletError(f"--tokens {args.tokens}: the prompt and its first token would pass "
                            f"the model's {max_position} positions")


def measure(args, log) -> tuple[dict, str]:
    """The payload of long-prompt.json and the device it ran on."""
    from torchlet.checkpoints import load_hf_dir
    from torchlet.text import load_tokenizer

    check_args(args)
    text, source = read_text(args.text) if args.text else default_text()
    device = resolve_device(args.device)
    threads = set_threads(args.threads)
    versions = versions_of(args, device)
    model_dir, model_name = load_model(args)
    checkpoint = load_hf_dir(model_dir, quantized=True)  # dequantized for whom reads floats
    versions[0] = for_floats(versions[0], args, device, checkpoint)
    check_args(args, checkpoint.config.max_position)
    ids = prompt_of(load_tokenizer(model_dir), text, args.tokens)
    dtype = resolve_dtype(args.dtype, device)
    contenders, failed, order = contenders_for(versions, checkpoint, ids, 1, device, dtype, log,
                                               formats=())
    bar = progress_bar(len(contenders) * (args.rounds + 1), not args.quiet, "long prompt")
    runs, cpu, before = interleave(contenders, failed, args.rounds, 1, bar, log,
                                   warmup=ids[-WARMUP_TOKENS:])
    bar.close()
    rows = summarize(contenders, runs, failed, order, log, warmed=False)
    add_prefix_stats(rows, contenders, failed, before)
    timed = [r for r in rows if "error" not in r]
    for row in timed:
        row["first_token_s_median"] = statistics.median(ms / 1e3 for ms in row["first_token_ms"])
        row["prefill_tok_s"] = len(ids) / row["first_token_s_median"]
        row["cpu_s"] = cpu[row["version"]]
        row["cpu_s_median"] = statistics.median(row["cpu_s"])
    hf = next((r for r in timed if r["version"] == HF), None)
    for row in timed:  # how many times faster than HF to the first token: a ratio of medians
        row["vs_hf"] = hf["first_token_s_median"] / row["first_token_s_median"] if hf else None
    dtype_name = str(dtype).removeprefix("torch.")
    job = {"name": "long-prompt", "prompt_tokens": len(ids), "text": source,
           "rounds": args.rounds, "model": model_name, "device": device, "dtype": dtype_name,
           "threads": threads, "default_version": versions[0].name,
           "describe": f"the first {len(ids):,} tokens of {source} (no chat template) to "
                       f"{model_name}, {dtype_name} on {device}, {threads}, one greedy token, "
                       f"batch 1; timed rounds: {args.rounds}, HF and the versions alternating, "
                       f"after one untimed warm-up each on {WARMUP_TOKENS} other tokens"}
    return {"workload": job, "rows": rows}, device
