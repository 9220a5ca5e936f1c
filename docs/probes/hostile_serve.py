"""Issue 42's hostile client against the real `torchlet serve`: 64 concurrent streams (chat and
completions, greedy and sampled) of which a third close after their first chunk or two, 56
malformed requests sent while they run and after, then the engine's state, /health, /metrics,
and SIGTERM during one more stream. A malformed request passes with a 4xx and OpenAI's error
body (or a 200 where accepting it is right: an ignored field, a seed taken modulo 2^63); a 5xx,
a body that is not JSON, a dropped connection or a traceback on the server's stderr fails.
Usage: PYTHONPATH=. python docs/probes/hostile_serve.py [--model DIR] [--streams 64] [--tokens N]
Exits 1 if anything failed."""
import argparse
import asyncio
import collections
import json
import signal
import subprocess
import sys
import threading
import time

import httpx

from torchlet.bench.serve import start

CHAT, TEXT = "/v1/chat/completions", "/v1/completions"
ANY = "any"  # a 200 is as right as a 4xx


def malformed(model: str) -> list[tuple[str, str, str, object, str]]:
    """(name, method, path, body: a dict sent as JSON, bytes sent as they are, or None, what
    it must get: "4xx" or ANY). Accepted ones ask for 2 tokens, so they cost little."""
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    text = {"model": model, "prompt": "hi", "max_tokens": 2}

    def c(**fields):  # the chat body with fields replaced (None: removed)
        return {k: v for k, v in {**chat, **fields}.items() if v is not None}

    def m(**fields):  # the chat body with its one message's fields replaced
        msg = {k: v for k, v in {"role": "user", "content": "hi", **fields}.items()
               if v is not None}
        return c(messages=[msg])

    def t(**fields):
        return {k: v for k, v in {**text, **fields}.items() if v is not None}

    raw = json.dumps(chat).encode()
    digits = b"1" + b"0" * 5_000
    return [
        ("invalid JSON", "POST", CHAT, b'{"model": ', "4xx"),
        ("truncated JSON", "POST", CHAT, raw[:-7], "4xx"),
        ("invalid UTF-8", "POST", CHAT, b'{"model": "\xff\xfe"}', "4xx"),
        ("empty body", "POST", CHAT, b"", "4xx"),
        ("a JSON array", "POST", CHAT, b"[1, 2]", "4xx"),
        ("a JSON number", "POST", TEXT, b"42", "4xx"),
        ("a JSON string", "POST", CHAT, b'"hello"', "4xx"),
        ("JSON null", "POST", TEXT, b"null", "4xx"),
        ("JSON nested 100,000 deep", "POST", CHAT,
         b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "4xx"),
        ("a 5,000-digit max_tokens", "POST", CHAT, raw[:-1] + b', "max_tokens": ' + digits + b"}",
         "4xx"),
        ("a 5,000-digit seed", "POST", TEXT,
         json.dumps(text).encode()[:-1] + b', "seed": -' + digits + b"}", "4xx"),
        ("a lone surrogate", "POST", CHAT, raw.replace(b'"hi"', b'"\\ud800 hi"'), "4xx"),
        ("missing model", "POST", CHAT, c(model=None), "4xx"),
        ("unknown model", "POST", CHAT, c(model="gpt-4o"), "4xx"),
        ("missing messages", "POST", CHAT, c(messages=None), "4xx"),
        ("messages a string", "POST", CHAT, c(messages="hi"), "4xx"),
        ("messages empty", "POST", CHAT, c(messages=[]), "4xx"),
        ("a message without role", "POST", CHAT, c(messages=[{"content": "hi"}]), "4xx"),
        ("a message without content", "POST", CHAT, c(messages=[{"role": "user"}]), "4xx"),
        ("an unknown role", "POST", CHAT, m(role="wizard"), "4xx"),
        ("content a number", "POST", CHAT, m(content=7), "4xx"),
        ("content an object", "POST", CHAT, m(content={"text": "hi"}), "4xx"),
        ("content an image part", "POST", CHAT,
         m(content=[{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]), "4xx"),
        ("a 2 MB message", "POST", CHAT, m(content="hello world " * 175_000), "4xx"),
        ("missing prompt", "POST", TEXT, t(prompt=None), "4xx"),
        ("prompt empty", "POST", TEXT, t(prompt=""), "4xx"),
        ("prompt two strings", "POST", TEXT, t(prompt=["a", "b"]), "4xx"),
        ("prompt ids and strings mixed", "POST", TEXT, t(prompt=[1, "a"]), "4xx"),
        ("prompt ids past the vocabulary", "POST", TEXT, t(prompt=[1, 49_152, 10 ** 9]), "4xx"),
        ("prompt ids negative", "POST", TEXT, t(prompt=[5, -1]), "4xx"),
        ("max_tokens negative", "POST", CHAT, c(max_tokens=-5), "4xx"),
        ("max_tokens 0", "POST", TEXT, t(max_tokens=0), "4xx"),
        ("max_tokens 10**9", "POST", CHAT, c(max_tokens=10 ** 9), "4xx"),
        ("max_tokens 2.5", "POST", CHAT, c(max_tokens=2.5), "4xx"),
        ("max_tokens a string", "POST", TEXT, t(max_tokens="ten"), "4xx"),
        ("max_tokens true", "POST", CHAT, c(max_tokens=True), ANY),  # pydantic reads it as 1
        ("max_completion_tokens 0", "POST", CHAT, c(max_completion_tokens=0), "4xx"),
        ("temperature negative", "POST", CHAT, c(temperature=-0.5), "4xx"),
        ("temperature 1e308", "POST", TEXT, t(temperature=1e308), ANY),  # finite: near uniform
        ("temperature 1e999 (inf)", "POST", CHAT, raw[:-1] + b', "temperature": 1e999}', "4xx"),
        ("temperature NaN", "POST", CHAT, raw[:-1] + b', "temperature": NaN}', "4xx"),
        ("temperature 'NaN' a string", "POST", TEXT, t(temperature="NaN"), "4xx"),
        ("temperature 1e-45", "POST", CHAT, c(temperature=1e-45), "4xx"),
        ("top_p 0", "POST", CHAT, c(temperature=0.7, top_p=0), "4xx"),
        ("top_p 1.5", "POST", TEXT, t(temperature=0.7, top_p=1.5), "4xx"),
        ("top_k 2**63", "POST", CHAT, c(temperature=0.7, top_k=2 ** 63), "4xx"),
        ("min_p 2", "POST", TEXT, t(temperature=0.7, min_p=2), "4xx"),
        ("seed negative", "POST", CHAT, c(temperature=0.7, seed=-3), ANY),  # taken mod 2^63
        ("seed 2**70", "POST", TEXT, t(temperature=0.7, seed=2 ** 70), ANY),
        ("n 3", "POST", CHAT, c(n=3), "4xx"),
        ("stop a number", "POST", CHAT, c(stop=5), "4xx"),
        ("stop an empty string", "POST", TEXT, t(stop=[""]), "4xx"),
        ("logprobs, tools, response_format", "POST", CHAT,
         c(logprobs=True, top_logprobs=5, response_format={"type": "json_object"},
           tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]), ANY),
        ("text/plain content type", "POST", TEXT, ("text/plain", json.dumps(text).encode()), ANY),
        ("GET on chat completions", "GET", CHAT, None, "4xx"),
        ("an unknown path", "POST", "/v1/embeddings", t(), "4xx"),
    ]


async def send(http: httpx.AsyncClient, case) -> dict:
    name, method, path, body, want = case
    headers = {"Content-Type": "application/json"}
    if isinstance(body, tuple):
        headers["Content-Type"], body = body
    content = json.dumps(body).encode() if isinstance(body, dict) else body
    row = {"name": name, "request": f"{method} {path} {(content or b'')[:120]!r}"}
    try:
        r = await http.request(method, path, content=content, headers=headers)
    except httpx.HTTPError as e:
        return {**row, "status": "dropped", "failure": f"{type(e).__name__}: {e}"}
    row.update(status=r.status_code, body=r.text[:300])
    try:
        answer = r.json()
    except ValueError:
        return {**row, "failure": "the body is not JSON"}
    if r.status_code >= 500:
        row["failure"] = "a 5xx"
    elif r.status_code >= 400:
        error = answer.get("error") if isinstance(answer, dict) else None
        if not (isinstance(error, dict) and isinstance(error.get("message"), str)
                and isinstance(error.get("type"), str)):
            row["failure"] = "not OpenAI's error body"
    elif want != ANY:
        row["failure"] = "accepted what it should refuse"
    elif not (isinstance(answer, dict) and answer.get("choices")):
        row["failure"] = "a 200 without choices"
    return row


def stream_body(i: int, model: str, tokens: int) -> tuple[str, dict]:
    """Stream i: chat or completion by parity, greedy or sampled (with top_p and a seed, or
    not) by i % 4, include_usage every fifth."""
    if i % 2 == 0:
        path, body = CHAT, {"messages": [{"role": "user", "content": f"Tell me about {i}."}]}
    else:
        path, body = TEXT, {"prompt": f"The number {i} is"}
    body.update(model=model, max_tokens=tokens, stream=True)
    if i % 4 == 1:
        body.update(temperature=0.8, top_p=0.9, seed=i)
    elif i % 4 == 2:
        body.update(temperature=0.6)
    if i % 5 == 0:
        body["stream_options"] = {"include_usage": True}
    return path, body


async def stream(http, i: int, model: str, tokens: int, started: asyncio.Event) -> dict:
    """One stream; every third (i % 3 == 2) closes after its first one or two data lines."""
    path, body = stream_body(i, model, tokens)
    leave = 1 + (i // 3) % 2 if i % 3 == 2 else None
    row = {"name": f"stream {i}", "request": f"POST {path} {json.dumps(body)}", "left": leave}
    lines = []
    try:
        async with http.stream("POST", path, json=body) as r:
            row["status"] = r.status_code
            if r.status_code != 200:
                row.update(body=(await r.aread()).decode(errors="replace")[:300],
                           failure="not 200")
                return row
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    lines.append(line[6:])
                    started.set()
                    if leave is not None and len(lines) >= leave:
                        return row  # closing the response drops the connection
    except httpx.HTTPError as e:
        return {**row, "status": "dropped", "failure": f"{type(e).__name__}: {e}"}
    chunks = [json.loads(x) for x in lines if x.startswith("{")]
    errors = [c["error"] for c in chunks if "error" in c]
    reasons = [ch.get("finish_reason") for c in chunks for ch in c.get("choices", [])]
    if errors:
        row["failure"] = f"an error chunk: {errors[0]}"
    elif not lines or lines[-1] != "[DONE]":
        row["failure"] = "no [DONE] at the end"
    elif not any(reasons):
        row["failure"] = "no finish_reason"
    return row


async def state(http) -> tuple[dict, float]:
    """The first /engine/state with nothing waiting or running, no block used or held by a
    table (an abort of a closed stream may still be on its way), or the last one after 60 s."""
    t0 = time.perf_counter()
    while True:
        s = (await http.get("/engine/state")).json()
        pool = s.get("pool") or {}
        if (not s["waiting"] and not s["running"] and not pool.get("num_used")
                and not s.get("tables")) or time.perf_counter() - t0 > 60:
            return s, time.perf_counter() - t0
        await asyncio.sleep(0.2)


async def hostile(url: str, model: str, streams: int, tokens: int):
    """The streams' rows, the malformed requests' rows, the state checks, and how many streams
    still ran once the first half of the malformed requests had their answers."""
    cases = malformed(model)
    limits = httpx.Limits(max_connections=streams + 8)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        started = asyncio.Event()
        running = [asyncio.create_task(stream(http, i, model, tokens, started))
                   for i in range(streams)]
        await started.wait()
        during = [await send(http, c) for c in cases[::2]]  # the engine busy with the streams
        busy = sum(not t.done() for t in running)  # still streaming: these were sent meanwhile
        done = await asyncio.gather(*running)
        after = [await send(http, c) for c in cases[1::2]]
        snapshot, waited = await state(http)
        health, metrics = await http.get("/health"), await http.get("/metrics")
    checks = [
        ("nothing waiting or running", not snapshot["waiting"] and not snapshot["running"],
         f"waiting {snapshot['waiting']}, running {snapshot['running']} (after {waited:.1f} s "
         f"of polling)"),
        ("no block used", not (snapshot.get("pool") or {}).get("num_used"),
         f"pool {snapshot.get('pool')}"),
        ("no block table", not snapshot.get("tables"), f"tables {snapshot.get('tables')}"),
        ("every request ended once", sum(snapshot["finished"].values()) == streams + sum(
            r["status"] == 200 for r in during + after), f"finished {snapshot['finished']}"),
        ("/health", health.status_code == 200 and health.json().get("status") == "ok",
         f"{health.status_code} {health.text[:100]}"),
        ("/metrics", metrics.status_code == 200 and "torchlet_generated_tokens_total" in
         metrics.text, f"{metrics.status_code}, {len(metrics.text)} bytes"),
    ]
    return done, during + after, checks, busy


async def sigterm(proc, url: str, model: str) -> dict:
    """One long stream; SIGTERM once its first text came. It must end with an error chunk and
    [DONE], and the server exit 0 within 60 s."""
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": 1000, "ignore_eos": True,
            "stream": True}
    lines, t0 = [], None
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        try:
            async with http.stream("POST", TEXT, json=body) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    lines.append(line[6:])
                    chunk = json.loads(line[6:]) if line.startswith("data: {") else {}
                    if t0 is None and any(c["text"] for c in chunk.get("choices", [])):
                        t0 = time.perf_counter()
                        proc.send_signal(signal.SIGTERM)
        except httpx.HTTPError as e:
            lines.append(f"dropped: {type(e).__name__}: {e}")
    closed = time.perf_counter()
    if t0 is None:  # no text came: stop it all the same, and fail
        proc.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.to_thread(proc.wait, 60)
    except subprocess.TimeoutExpired:  # a hang
        proc.kill()
        code = f"hung, killed ({proc.wait()})"
    ended = lines[-2:] if len(lines) >= 2 else lines
    good = (len(ended) == 2 and ended[1] == "[DONE]" and "shutting down" in ended[0])
    signalled, t0 = t0 is not None, t0 or closed
    return {"code": code, "closed": closed - t0, "seconds": time.perf_counter() - t0,
            "stream_end": ended, "stream_ok": good, "signalled": signalled}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="default: serve's (SmolLM2-135M-Instruct)")
    p.add_argument("--impl", default=None, help="default: the version serve picks")
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--tokens", type=int, default=16, help="max_tokens of each stream")
    p.add_argument("--threads", type=int, default=None, help="the server's torch threads")
    args = p.parse_args()
    t0 = time.perf_counter()
    server = argparse.Namespace(max_running=8, impl=args.impl, impl_root=None, model=args.model,
                                device="cpu", threads=args.threads, max_model_len=None,
                                max_waiting=None, num_blocks=None, dtype=None)
    proc, banner, url = start(server)
    log = [banner + "\n"]
    # the rest of stderr, kept: a full pipe would block the server
    reader = threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True)
    reader.start()
    print(banner, flush=True)
    try:
        model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        streams, requests, checks, busy = asyncio.run(hostile(url, model, args.streams,
                                                              args.tokens))
        term = asyncio.run(sigterm(proc, url, model))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    wall = time.perf_counter() - t0

    failures = [r for r in streams + requests if "failure" in r]
    left = sum(r["left"] is not None for r in streams)
    print(f"\n{len(streams)} streams ({left} closed early): statuses "
          f"{dict(collections.Counter(r['status'] for r in streams))}")
    print(f"{len(requests)} malformed requests: statuses "
          f"{dict(sorted(collections.Counter(str(r['status']) for r in requests).items()))}; "
          f"{(len(requests) + 1) // 2} (every other one) sent while the streams ran ({busy} still "
          f"streaming when those were answered), the rest after")
    for r in requests:
        print(f"  {r['status']}  {r['name']}"
              + (f"  FAILED: {r['failure']}" if "failure" in r else ""))
    print("engine state after the streams:")
    for name, ok, detail in checks:
        print(f"  {'ok    ' if ok else 'FAILED'} {name}: {detail}")
    stderr = "".join(log)
    traceback = "Traceback" in stderr or "Exception in ASGI" in stderr
    term_ok = term["code"] == 0 and term["stream_ok"] and term["signalled"] and not traceback
    print(f"SIGTERM during a stream: the stream ended {term['closed']:.1f} s after the signal "
          f"with {term['stream_end']}; exit {term['code']} after {term['seconds']:.1f} s; stderr "
          f"{'holds a traceback' if traceback else 'holds no traceback'}: "
          f"{'ok' if term_ok else 'FAILED'}")
    for r in failures:
        print(f"FAILED {r['name']}: {r['failure']}\n  request: {r['request'][:300]}\n"
              f"  answer: {r.get('status')} {r.get('body', '')[:300]}")
    if traceback or len(log) > 1:
        print("server stderr:\n" + stderr[-4000:])
    bad = len(failures) + sum(not ok for _, ok, _ in checks) + (not term_ok)
    print(f"wall time {wall:.1f} s; {'all held' if not bad else f'{bad} failure(s)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
