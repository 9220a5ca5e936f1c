"""`torchlet bench serve`: `torchlet serve` in a child process, sent a Poisson stream of
requests at each rate, as clients would send them.

The requests are drawn once, seeded: ShareGPT-like lengths (log-normal prompts and answers,
median prompt about 1/8 of the context and answer about half that, clipped to fit it) of random
token ids, sent as /v1/completions prompts of token ids with ignore_eos, so that each makes
exactly the tokens it asks for. At each rate the same requests arrive with exponential gaps of
mean 1/rate. A client measures, per request, the time to its first streamed token (TTFT) and
the gaps between the next ones (ITL); throughput is the output tokens over the seconds from the
first request sent to the last token received."""
from __future__ import annotations

import asyncio
import json
import math
import random
import re
import statistics
import subprocess
import sys
import time

from torchlet.contract import TorchletError

ENTRY = "import sys; from torchlet.cli import main; sys.exit(main())"
VOCAB = 256  # prompt ids are drawn below it: every model's vocabulary has them
WARM_UP = 8  # requests sent once, all at once, before the measured rates


def draw(n: int, context: int, vocab: int, seed: int) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = min(context // 2, max(1, round(rng.lognormvariate(math.log(context / 8), 0.8))))
        answer = min(context - prompt, max(1, round(rng.lognormvariate(
            math.log(context / 16), 0.8))))
        out.append(([rng.randrange(vocab) for _ in range(prompt)], answer))
    return out


def start(args) -> tuple[subprocess.Popen, str, str]:
    """The server, its banner and its address."""
    flags = ["serve", "--port", "0", "--max-running", str(args.max_running)]
    for flag in ("impl", "impl_root", "model", "device", "threads", "max_model_len",
                 "max_waiting", "num_blocks", "dtype"):
        value = getattr(args, flag)
        if value is not None:
            flags += [f"--{flag.replace('_', '-')}", str(value)]
    proc = subprocess.Popen([sys.executable, "-c", ENTRY, *flags], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = []
    for line in proc.stderr:
        log.append(line)
        m = re.search(r"serving on (http://\S+)", line)
        if m:
            return proc, line.strip(), m.group(1)
    proc.wait()
    raise RuntimeError("torchlet serve did not start:\n" + "".join(log))


async def one(http, url, model, prompt, n, at, t0, stream) -> dict:
    await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))  # its arrival time
    sent = time.perf_counter()
    times = []
    body = {"model": model, "prompt": prompt, "max_tokens": n, "stream": stream,
            "ignore_eos": True}
    if stream:
        body["stream_options"] = {"include_usage": True}
    tokens = 0
    async with http.stream("POST", f"{url}/v1/completions", json=body) as r:
        if r.status_code != 200:
            return {"sent": sent, "times": [], "tokens": 0,
                    "error": f"{r.status_code} {(await r.aread()).decode(errors='replace')}"}
        if not stream:  # one answer: its usage, and when it came
            tokens = json.loads(await r.aread())["usage"]["completion_tokens"]
            return {"sent": sent, "times": [], "tokens": tokens, "done": time.perf_counter()}
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.perf_counter())
    return {"sent": sent, "times": times, "tokens": tokens,
            "done": times[-1] if times else time.perf_counter()}


async def rate_run(url, model, requests, rate, seed, stream=True) -> dict:
    import httpx

    rng = random.Random(seed)
    at, arrivals = 0.0, []
    for _ in requests:
        arrivals.append(at)
        at += rng.expovariate(rate)
    limits = httpx.Limits(max_connections=len(requests) + 4)
    async with httpx.AsyncClient(timeout=None, limits=limits) as http:
        t0 = time.perf_counter()
        done = await asyncio.gather(*(one(http, url, model, p, n, a, t0, stream)
                                      for (p, n), a in zip(requests, arrivals)))
    failed = [d["error"] for d in done if "error" in d]
    if failed:
        raise TorchletError(f"{len(failed)} of {len(done)} requests failed at rate {rate:g}/s; "
                            f"the first: {failed[0]}")
    if stream and not any(d["times"] for d in done):
        raise TorchletError(f"no request streamed a token at rate {rate:g}/s")
    end = max(d["done"] for d in done)
    ttft = [d["times"][0] - d["sent"] for d in done if d["times"]]
    itl = [b - a for d in done for a, b in zip(d["times"], d["times"][1:])]
    tokens = sum(d["tokens"] for d in done)
    pct = lambda xs, q: statistics.quantiles(xs, n=100)[q - 1] * 1e3 if len(xs) > 1 else None  # noqa: E731
    return {"rate": rate, "requests": len(requests), "output_tokens": tokens,
            "seconds": end - t0, "output_tok_s": tokens / (end - t0),
            "ttft_p50_ms": pct(ttft, 50), "ttft_p99_ms": pct(ttft, 99),
            "itl_p50_ms": pct(itl, 50), "itl_p99_ms": pct(itl, 99)}


def requests_of(args, context: int) -> list[tuple[list[int], int]]:
    """The requests sent at every rate: ShareGPT-like lengths for this context, or the first
    --requests of nano-vllm's workload (`bench gpu-workload`'s, ids up to 10,000)."""
    if args.lengths == "nano-vllm":
        from .workloads import nano_vllm_workload
        workload = nano_vllm_workload()
        n = args.requests or workload.num_requests
        requests = [(list(p), m) for p, m in zip(workload.prompts[:n], workload.output_lens[:n])]
        longest = max(len(p) + m for p, m in requests)
        if longest > context:
            raise TorchletError(f"--lengths nano-vllm needs a context of {longest} tokens (prompt "
                                f"and answer); the server's is {context}: give --max-model-len "
                                f"{longest} and a model whose positions reach it")
        return requests
    return draw(args.requests or 64, context, VOCAB, args.seed)


def describe(args, requests) -> str:
    lengths = ("nano-vllm's workload" if args.lengths == "nano-vllm" else
               f"random token ids, ShareGPT-like lengths (seed {args.seed})")
    how = "answered whole (stream false)" if args.no_stream else "streamed"
    return (f"{len(requests)} requests ({sum(len(p) for p, _ in requests)} prompt and "
            f"{sum(n for _, n in requests)} output tokens) of {lengths}, Poisson arrivals at each "
            f"rate (inf: all at once), eos ignored, {how}")


def run_serve_bench(args) -> tuple[list[dict], str, str]:
    import httpx

    proc, banner, url = start(args)
    try:
        print(banner, file=sys.stderr, flush=True)
        model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        context = int(re.search(r"context (\d+)", banner).group(1))
        requests = requests_of(args, context)
        # Not measured: the server's first prompts compile its kernels (seconds on a GPU).
        asyncio.run(rate_run(url, model, requests[:WARM_UP], float("inf"), args.seed,
                             stream=not args.no_stream))
        rows = []
        for rate in [float(r) for r in args.rates.split(",")]:
            row = asyncio.run(rate_run(url, model, requests, rate, args.seed,
                                       stream=not args.no_stream))
            row["version"] = re.search(r"\[(\S+) on", banner).group(1)
            rows.append(row)
            latency = ("" if args.no_stream else
                       f", TTFT p50 {row['ttft_p50_ms']:.1f} ms p99 {row['ttft_p99_ms']:.1f} ms, "
                       f"ITL p50 {row['itl_p50_ms']:.1f} ms p99 {row['itl_p99_ms']:.1f} ms")
            print(f"rate {rate:g}/s: {row['output_tok_s']:.1f} tok/s{latency}", file=sys.stderr,
                  flush=True)
        return rows, banner, describe(args, requests)
    finally:
        proc.terminate()
        proc.wait(60)
