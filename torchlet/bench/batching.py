"""`torchlet bench batching`: what continuous batching buys a server. The same requests go to
one `torchlet serve` (a child process, as `bench serve` starts it), first one after another,
then all at once; the figure is the seconds of the second over the first, with the answers
compared token for token (greedy, so batching must not change them).

Each request is a /v1/completions prompt of random token ids (seeded, distinct, below every
vocabulary's 256th id) with ignore_eos, so that each makes exactly --tokens tokens. One request
is sent first and not measured: a server's first prompt builds what it builds once."""
from __future__ import annotations

import asyncio
import random
import re
import sys
import time

from torchlet.contract import TorchletError

from .serve import VOCAB, start


async def _answer(http, url, model, prompt, tokens) -> str:
    body = {"model": model, "prompt": prompt, "max_tokens": tokens, "ignore_eos": True,
            "temperature": 0}
    r = await http.post(f"{url}/v1/completions", json=body)
    if r.status_code != 200:
        raise TorchletError(f"the server answered {r.status_code}: {r.text[:200]}")
    return r.json()["choices"][0]["text"]


async def _both(url, model, prompts, tokens) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=len(prompts) + 4)
    async with httpx.AsyncClient(timeout=None, limits=limits) as http:
        await _answer(http, url, model, [1, 2, 3], tokens)  # warm-up, not measured
        t0 = time.perf_counter()
        alone = [await _answer(http, url, model, p, tokens) for p in prompts]
        t1 = time.perf_counter()
        together = await asyncio.gather(*(_answer(http, url, model, p, tokens) for p in prompts))
        t2 = time.perf_counter()
    return {"requests": len(prompts), "tokens": tokens, "sequential_s": t1 - t0,
            "concurrent_s": t2 - t1, "ratio": (t2 - t1) / (t1 - t0),
            "same_answers": list(together) == alone}


def prompts_of(n: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(VOCAB) for _ in range(length)] for _ in range(n)]


def run_batching_bench(args) -> tuple[dict, str, str]:
    """The row, the server's banner and what was sent."""
    import httpx

    args.max_running = args.requests  # every request can run at once
    for flag in ("max_model_len", "max_waiting", "num_blocks"):
        setattr(args, flag, None)  # the server's defaults, as a user starts it
    proc, banner, url = start(args)
    try:
        print(banner, file=sys.stderr, flush=True)
        model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        prompts = prompts_of(args.requests, args.prompt_tokens, args.seed)
        row = asyncio.run(_both(url, model, prompts, args.tokens))
        row["version"] = re.search(r"\[(\S+) on", banner).group(1)
        described = (f"{args.requests} requests of {args.prompt_tokens} random prompt token ids "
                     f"(seed {args.seed}) and {args.tokens} output tokens each, greedy, eos "
                     f"ignored, whole answers; sent one after another, then all at once")
        return row, banner, described
    finally:
        proc.terminate()
        proc.wait(60)
