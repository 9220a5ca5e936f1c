"""`torchlet bench`: what each version buys, measured through the engine contract.

    torchlet bench main-job       one chat prompt: the default version against HF generate
    torchlet bench long-prompt    a 5,000-token prompt's first token: the same pair
    torchlet bench cpu            every CPU version on a small workload (32 requests, 10..100)
    torchlet bench gpu-workload   nano-vllm's 256-request workload on a Qwen2.5-0.5B-shaped model
    torchlet bench mixed          decodes while long prompts arrive: ITL p50/p99, TTFT
    torchlet bench tp             tensor parallelism: bytes per rank, decode step, TP=1 and 2
    torchlet bench decode         one decode step: ms and GB/s, batch x context
    torchlet bench kernel         the newest paged decode attention against torch SDPA
    torchlet bench anchors        a decode step's matmuls alone, a gpt-fast-style step, the floor
    torchlet bench floor          the physical floor of the GPU workload, computed
    torchlet bench serve          torchlet serve under Poisson arrivals: throughput, TTFT, ITL
    torchlet bench speculative    k guessed tokens a step (v17) against none: copy and chat prompts
    torchlet bench structured     a JSON schema on every request (v19) against none: a decode step
    torchlet bench report         docs/benchmarks.md from the result files

Each run prints a table and writes DIR/KIND.json and DIR/KIND.png (default bench-results/).
"""
# The package: this parser; commands.py, what each subcommand does; flags.py, what the shared
# flags resolve to (versions, device, dtype, model shape, sizes); run.py and drive.py, one
# version built and driven through the contract; main_job.py, the user's one prompt (and
# long_prompt.py, a long one's first token, on main_job's contenders and rounds); speculative.py,
# speculative decoding's k against k = 0 on the default model; micro.py,
# the decode step and the kernel alone; workloads.py, floor.py, hf.py, the requests, the floor
# and the HF baseline; report.py, doc.py and targets.py, the JSON, charts and docs/benchmarks.md.
from __future__ import annotations

import argparse
import importlib

from torchlet.running import DTYPES  # the standard library only, like this module

# `bench decode`'s timed and untimed steps a cell. A cell's first steps after its prefill ran
# slow on fresh H100s (1.05-1.20 against 0.85-0.93 ms at batch 1 with 5 warm-up steps,
# docs/gpu.md 2026-12-06): more of both.
DECODE_STEPS, DECODE_WARMUP = 50, 20

SHAPES = ("qwen2.5-0.5b", "qwen3-0.6b", "qwen2.5-7b", "qwen2.5-72b", "cpu")


def add_commands(subparsers) -> None:
    bench = subparsers.add_parser("bench", help="measure versions: tok/s, latency, memory",
                                  description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = bench.add_subparsers(dest="bench", metavar="KIND", required=True)

    p = _parser(sub, "main-job", _lazy("run_main_job"),
                "one chat prompt: the version `torchlet generate` picks here vs HF generate",
                versions_help="comma-separated versions to time besides the default one, e.g. "
                              "v06,v12 (Triton versions on a CPU with their kernels off)")
    p.add_argument("--prompt", default="What is the capital of France?", help="the user message")
    p.add_argument("--model", default=None, help="a Hugging Face checkpoint directory with its "
                                                 "tokenizer (default: SmolLM2-135M-Instruct)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5, help="timed runs of each, interleaved")
    p.add_argument("--device", default=None, help="default: cuda if there is one, else cpu")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="auto: float32 on CPU, bfloat16 on CUDA (as torchlet generate)")
    p.add_argument("--threads", default=None, metavar="N[,N...]",
                   help="torch CPU threads; a list such as 1,2 runs the whole comparison at each "
                        "count in turn, in this process (default: as torchlet generate picks "
                        "them)")

    p = _parser(sub, "long-prompt", _lazy("run_long_prompt"),
                "a long prompt's first token: the version `torchlet generate` picks here vs HF",
                versions_help="comma-separated versions to time besides the default one")
    p.add_argument("--tokens", type=int, default=5000, help="prompt length in tokens")
    p.add_argument("--text", default=None, metavar="FILE",
                   help="the text the prompt is cut from, repeated if short (default: this "
                        "checkout's README.md and docs/*.md)")
    p.add_argument("--model", default=None, help="a Hugging Face checkpoint directory with its "
                                                 "tokenizer, or a .gguf file (default: "
                                                 "SmolLM2-135M-Instruct)")
    p.add_argument("--rounds", type=int, default=3,
                   help="timed runs of each, interleaved (each is a whole prefill: slow on a CPU)")
    p.add_argument("--device", default=None, help="default: cuda if there is one, else cpu")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="auto: float32 on CPU, bfloat16 on CUDA (as torchlet generate)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: as torchlet generate picks them)")

    p = _parser(sub, "cpu", _lazy("run_cpu"), "every CPU version on a small seeded workload")
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: timings don't depend on what else runs)")
    p.add_argument("--model", default=None, help="a Hugging Face directory instead of the random "
                                                 "in-memory model")
    p.add_argument("--generate-batch", action="store_true",
                   help="run versions without the step API as one generate() call, padded to "
                        "the longest request, instead of streaming requests one by one")
    p.add_argument("--in-process", action="store_true",
                   help="run every version in this process (faster; peak RSS then means little)")
    _engine_options(p, max_running=None, max_step_tokens=None)
    _shared_prefix(p)

    p = _parser(sub, "gpu-workload", _lazy("run_gpu_workload"), "nano-vllm's bench.py workload")
    _device_options(p)
    p.add_argument("--requests", type=int, default=256,
                   help="the first N requests of the workload (default: all 256)")
    p.add_argument("--hf-baseline", action="store_true", help="also time HF transformers generate")
    p.add_argument("--hf-batch-size", type=int, default=64)
    _engine_options(p, max_running=None, max_step_tokens=16384)
    _shared_prefix(p)
    _quantize(p)
    p.add_argument("--repeats", type=int, default=None,
                   help="runs of each version, interleaved, each on a fresh engine: the row is "
                        "the median run's and lists every run's wall time (default 3 on CUDA, "
                        "1 on CPU); HF generate runs once")
    _anchor_options(p)
    _rates(p)

    p = _parser(sub, "mixed", _lazy("run_mixed"), "requests decoding while long prompts arrive: "
                "inter-token latency and the long prompts' first tokens")
    _device_options(p)
    p.add_argument("--decoders", type=int, default=16, help="requests decoding throughout")
    p.add_argument("--short-len", type=int, default=64, help="their prompts' tokens")
    p.add_argument("--decode-tokens", type=int, default=None,
                   help="tokens each decodes (default: 512 on CUDA, 64 on CPU)")
    p.add_argument("--long-prompts", type=int, default=16, help="long prompts arriving")
    p.add_argument("--long-len", type=int, default=None,
                   help="their tokens (default: 8192 on CUDA, 512 on CPU)")
    p.add_argument("--long-tokens", type=int, default=4, help="tokens each long prompt asks for")
    p.add_argument("--every", type=int, default=None,
                   help="steps between arrivals (default: 16 on CUDA, 4 on CPU)")
    p.add_argument("--budget", type=int, default=None,
                   help="max_step_tokens of a chunked-prefill version (default: 2048 on CUDA, "
                        "its default there, and 64 on CPU)")

    p = _parser(sub, "tp", _lazy("run_tp"), "tensor parallelism: each rank's weight and K/V "
                "bytes and the decode step, at TP=1 and TP=2")
    _device_options(p)
    p.add_argument("--tensor-parallel", default=None, help="degrees, default 1,2")
    p.add_argument("--batch", default="4", help="requests decoding, comma-separated batches "
                                                "timed on one engine, e.g. 1,64")
    p.add_argument("--context", type=int, default=64, help="their prompts' tokens")
    p.add_argument("--steps", type=int, default=10, help="decode steps timed")
    p.add_argument("--workload", choices=("nano-vllm",), default=None,
                   help="run nano-vllm's requests instead of timing decode steps")
    p.add_argument("--requests", type=int, default=256, help="the workload's first N requests")
    p.add_argument("--cut", type=int, default=None, metavar="N",
                   help="cut every prompt to its first N ids and every output to N tokens")
    p.add_argument("--layers", type=int, default=None, help="the shape with N layers")
    p.add_argument("--scale", type=int, default=1, metavar="N",
                   help="the shape's widths divided by N, its heads kept (a dry run's shape)")
    _engine_options(p, max_running=None, max_step_tokens=16384)
    _rates(p)

    p = _parser(sub, "decode", _lazy("run_decode"), "one decode step, batch x context")
    _device_options(p)
    _cells(p)
    _quantize(p)
    p.add_argument("--steps", type=int, default=DECODE_STEPS)
    p.add_argument("--warmup", type=int, default=DECODE_WARMUP)
    _engine_options(p, max_running=None, max_step_tokens=16384)
    _anchor_options(p)
    _rates(p)

    p = sub.add_parser("anchors", help="what a decode step could cost, batch x context: its "
                                       "matmuls alone, a gpt-fast-style static-cache step, "
                                       "and the floor")
    _device_options(p)
    _cells(p)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    _anchor_options(p, switch=False)
    p.add_argument("--out", default="bench-results", help="where anchors.json and .png go")
    _rates(p)
    p.set_defaults(run=_lazy("run_anchors"), bench_parser=p)

    p = _parser(sub, "kernel", _lazy("run_kernel"),
                "a version's paged decode attention kernel vs torch SDPA")
    _device_options(p)
    _cells(p)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--iters", type=int, default=50)
    _rates(p)

    p = sub.add_parser("floor", help="the GPU workload's physical floor, computed")
    p.add_argument("--model-shape", choices=SHAPES, default=SHAPES[0])
    _rates(p)
    p.set_defaults(run=_lazy("run_floor"), bench_parser=p)

    p = sub.add_parser("serve", help="torchlet serve under a Poisson stream of requests: "
                                     "throughput, TTFT and ITL p50/p99 at each rate")
    p.add_argument("--rates", default="1,4,16", help="requests per second, comma-separated")
    p.add_argument("--requests", type=int, default=None, help="requests sent at each rate "
                   "(default: 64 ShareGPT-like ones, or nano-vllm's 256)")
    p.add_argument("--lengths", choices=("sharegpt", "nano-vllm"), default="sharegpt",
                   help="ShareGPT-like lengths drawn for the model's context, or nano-vllm's "
                        "workload (the requests of `bench gpu-workload`); a rate of inf sends "
                        "them all at once")
    p.add_argument("--no-stream", action="store_true", help="ask for whole answers (stream "
                   "false): throughput without a server event and a client parse per token")
    p.add_argument("--seed", type=int, default=0)
    _server_options(p)
    p.add_argument("--max-running", type=int, default=8, help="the server's --max-running")
    p.add_argument("--max-model-len", type=int, default=None, help="the server's --max-model-len")
    p.add_argument("--max-waiting", type=int, default=None, help="the server's --max-waiting")
    p.add_argument("--num-blocks", type=int, default=None, help="the server's --num-blocks")
    p.add_argument("--dtype", default=None, help="the server's --dtype")
    p.add_argument("--out", default="bench-results", help="where serve.json and serve.png go")
    p.set_defaults(run=_lazy("run_serve"), bench_parser=p)

    p = sub.add_parser("batching", help="what continuous batching buys a server: the same "
                                        "requests through torchlet serve one after another, "
                                        "then all at once")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--tokens", type=int, default=16, help="output tokens of each request")
    p.add_argument("--prompt-tokens", type=int, default=24, help="prompt tokens of each request")
    p.add_argument("--seed", type=int, default=0)
    _server_options(p)
    p.add_argument("--dtype", default=None, help="the server's --dtype")
    p.add_argument("--out", default="bench-results", help="where batching.json and .png go")
    p.set_defaults(run=_lazy("run_batching"), bench_parser=p)

    p = sub.add_parser("speculative", help="speculative decoding (v17): tok/s with k guesses a "
                                           "step against k=0, on copy and chat prompts")
    p.add_argument("--impl", default=None,
                   help="version (default: the newest with speculative)")
    p.add_argument("--impl-root", default=None, help="tree of versions (default: implementations/)")
    p.add_argument("--model", default=None, help="a Hugging Face checkpoint directory with its "
                                                 "tokenizer, or a .gguf file (default: "
                                                 "SmolLM2-135M-Instruct)")
    p.add_argument("--batches", default="1,8", help="requests decoding at once, comma-separated")
    p.add_argument("--ks", default="0,2,4",
                   help="tokens guessed a step, comma-separated (k=0, the baseline, always runs)")
    p.add_argument("--proposers", default="ngram",
                   help="what guesses, comma-separated, as --proposer takes it: ngram, self:N "
                        "(the model's first N layers), a draft model's path (default: ngram)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens a request makes")
    p.add_argument("--device", default=None, help="default: cuda if there is one, else cpu")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="auto: float32 on CPU, bfloat16 on CUDA (as torchlet generate)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: as torchlet generate picks them)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="build every engine (k=0's too) with v17's batch_invariant, whose rows "
                        "are the same bits in any batch (on the Triton kernels: a GPU)")
    p.add_argument("--out", default="bench-results", help="where speculative.json and .png go")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(run=_lazy("run_speculative"), bench_parser=p)

    p = sub.add_parser("structured", help="structured output (v19): a decode step with a JSON "
                                          "schema on every request against none")
    p.add_argument("--impl", default=None,
                   help="version (default: the newest with structured_output)")
    p.add_argument("--impl-root", default=None, help="tree of versions (default: implementations/)")
    p.add_argument("--model", default=None, help="a Hugging Face checkpoint directory with its "
                                                 "tokenizer, or a .gguf file (default: "
                                                 "SmolLM2-135M-Instruct)")
    p.add_argument("--batches", default="1,8,64", help="requests decoding at once, comma-separated")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens a request makes at most")
    p.add_argument("--device", default=None, help="default: cuda if there is one, else cpu")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="auto: float32 on CPU, bfloat16 on CUDA (as torchlet generate)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: as torchlet generate picks them)")
    p.add_argument("--out", default="bench-results", help="where structured.json and .png go")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(run=_lazy("run_structured"), bench_parser=p)

    p = sub.add_parser("report", help="regenerate docs/benchmarks.md from the result files")
    p.add_argument("--results", default="bench-results", help="directory of fresh KIND.json files")
    p.add_argument("--doc", default=None, help="default: docs/benchmarks.md of this checkout")
    p.set_defaults(run=_lazy("run_report"), bench_parser=p)


def _server_options(p) -> None:
    """What a bench that starts `torchlet serve` passes on to it."""
    p.add_argument("--impl", default=None, help="version to serve (default: as torchlet serve)")
    p.add_argument("--impl-root", default=None, help="tree of versions (default: implementations/)")
    p.add_argument("--model", default=None, help="a Hugging Face checkpoint directory with its "
                                                 "tokenizer (default: SmolLM2-135M-Instruct)")
    p.add_argument("--device", default=None, help="default: cuda if there is one, else cpu")
    p.add_argument("--threads", type=int, default=None, help="the server's torch threads")


def _parser(sub, name, run, help_text, versions_help="comma-separated, e.g. v00,v02 (default: "
                                                    "all that fit the benchmark)"):
    p = sub.add_parser(name, help=help_text)
    p.add_argument("--versions", default=None, help=versions_help)
    p.add_argument("--impl-root", default=None, help="tree of versions (default: implementations/)")
    p.add_argument("--out", default="bench-results", help="where KIND.json and KIND.png go")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(run=run, bench_parser=p)
    return p


def _device_options(p) -> None:
    p.add_argument("--device", default=None, help="default: cuda if there is one, else cpu")
    p.add_argument("--dtype", default="auto", help="auto: bfloat16 on CUDA, float32 on CPU")
    p.add_argument("--model-shape", choices=SHAPES, default=None,
                   help="default: qwen2.5-0.5b on CUDA, the small CPU model on CPU")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: 1 on CPU, where threads spinning against "
                        "each other on a busy machine cost far more than they give)")


def _cells(p) -> None:
    p.add_argument("--batches", default=None, help="default 1,8,64,256 (1,4 on CPU)")
    p.add_argument("--contexts", default=None, help="default 128,1024,4096 (32,128 on CPU)")


def _engine_options(p, max_running, max_step_tokens) -> None:
    p.add_argument("--max-running", type=int, default=max_running,
                   help="requests running at once: passed to the option each version declares "
                        "for it (max_running, or v05's max_lanes)")
    p.add_argument("--max-step-tokens", type=int, default=max_step_tokens)
    p.add_argument("--build-opt", action="append", default=[], metavar="NAME=INT",
                   help="another build option, passed only to versions whose OPTIONS declare it")


def _anchor_options(p, switch: bool = True) -> None:
    if switch:
        p.add_argument("--anchors", action=argparse.BooleanOptionalAction, default=None,
                       help="also time, in this process, the step's matmuls alone and a "
                            "gpt-fast-style step at the same cells (`bench anchors`; default: "
                            "on CUDA only)")
    p.add_argument("--compile", choices=("default", "max-autotune-no-cudagraphs", "none"),
                   default="default", help="torch.compile mode of the gpt-fast-style step on "
                                           "CUDA (a CPU runs it eagerly)")


def _quantize(p) -> None:
    p.add_argument("--quantize", choices=("int8", "int4"), default=None,
                   help="v18 and later: the weights quantized at load (the weights option; "
                        "other versions run float)")


def _shared_prefix(p) -> None:
    p.add_argument("--shared-prefix", type=int, default=0, metavar="N",
                   help="start every prompt with the same N random tokens (a system prompt), so "
                        "a prefix cache has something to find; versions with prefix_cache then "
                        "report their hit rate")


def _rates(p) -> None:
    p.add_argument("--bandwidth", type=float, default=None,
                   help="bytes/s (default: the H200's measured 4.3e12)")
    p.add_argument("--flops", type=float, default=None,
                   help="dense bf16 FLOP/s (default: the H200's 7.9e14)")


def _lazy(name: str):
    """Torch and the versions load only when a benchmark runs, not for `torchlet --help`."""
    return lambda args: getattr(importlib.import_module("torchlet.bench.commands"), name)(args)


