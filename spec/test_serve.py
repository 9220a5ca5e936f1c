"""Page contract: `torchlet serve`, an OpenAI-compatible server over the step API.

What it shows: the serving loop. Requests arrive over HTTP while others run; the engine's loop
runs in one background thread, which takes them from a queue between steps and hands each
request's tokens back to its handler; the handler turns them into text (stop strings that span
tokens included) and streams them as server-sent events. A client that goes is aborted before
the next step and its blocks are freed; bad input is refused with OpenAI's JSON error and
queues nothing; SIGTERM ends every running request with an error chunk and exits 0.

Core principle: the spec is a client. The official `openai` package (and plain httpx for what
the client hides: raw chunks, headers, invalid JSON) talks to `torchlet serve` running in a
child process on a free loopback port, and every expected answer is the one `engine.generate`
of the same version gives in this process. What the engine holds is read from the server's own
/engine/events feed and /metrics, never from its objects.

Files to compare: torchlet/serve/ (worker.py the engine thread, app.py the endpoints,
protocol.py the checks and stop strings, metrics.py), spec/support/serve_server.py.

Tradeoff left visible: the model is a tiny random Llama answering in printable ASCII (one
character per token: spec/support/hf_dirs.py printable_only), whose text shows every token.
Two servers run, each a child process (about 5 s to start, mostly torch's import): one on the
PyTorch path, fast, with a pool of 6 usable blocks, so that 64 clients preempt one another; one
with Triton's interpreter, about 0.1 s a step, so that a request is still running when its
client goes or SIGTERM comes, however loaded the machine.
"""
from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path

import httpx
import openai
import pytest

import implementations
from spec.support.hf_dirs import save_tiny
from spec.support.serve_server import Server
from torchlet import cli
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import PREFIX_CACHE, REQUEST_STATES, GenerationParams
from torchlet.engines import build_sized
from torchlet.text import load_tokenizer, prompt_ids, stop_ids

CONTEXT = 128      # the fixture's max_position_embeddings
NUM_BLOCKS = 7     # the null block and 6 of 16 tokens: 96 tokens in all
NEW = 8


@pytest.fixture(scope="module")
def root(request) -> Path:
    given = request.config.getoption("--impl-root")
    return Path(given).resolve() if given else implementations.REFERENCE_ROOT


@pytest.fixture(scope="module")
def version(root):
    """The newest version that samples, pages and shares prefixes: every part of the API."""
    able = [v for v in implementations.discover(root) if PREFIX_CACHE in v.capabilities]
    if not able:
        pytest.skip(f"no version under {root} has {PREFIX_CACHE}")
    return able[-1]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("serve_model")
    save_tiny(path, "llama", tokenizer=True, seed=5, printable=True)
    return path


@pytest.fixture(scope="module")
def tokenizer(model):
    return load_tokenizer(model)


@pytest.fixture(scope="module")
def server(root, version, model):
    s = Server(root, version.name, model, "--num-blocks", str(NUM_BLOCKS), "--max-running", "8")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def slow_server(root, version, model):
    s = Server(root, version.name, model, "--triton-interpret", "--max-running", "2")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0,
                       timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def engine(version, model):
    return build_sized(version, load_hf_dir(model), max_model_len=CONTEXT, max_running=8,
                       **cli.serving_options(version, "cpu"))


def solo(engine, tokenizer, prompts, interpret=False, **settings) -> list[str]:
    """Each prompt's answer from engine.generate: the server's path on a CPU (Triton kernels
    off, or in the interpreter)."""
    params = GenerationParams(eos_token_ids=stop_ids(tokenizer, (tokenizer.eos_token_id,)),
                              **{"max_new_tokens": NEW, **settings})
    with cli.kernels_off("cpu", interpret):
        outs = engine.generate(prompts, params)
    return [tokenizer.decode(t, skip_special_tokens=True) for t in outs]


def chat_ids(tokenizer, question: str) -> list[int]:
    return prompt_ids(tokenizer, [{"role": "user", "content": question}])


def user(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def feed(http: httpx.Client):
    """The server's /engine/events: one snapshot per event, as the page gets them."""
    with http.stream("GET", "/engine/events") as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                yield json.loads(line[6:])


def idle(http: httpx.Client) -> dict:
    """The first snapshot with nothing waiting or running (a stopped request's abort may still
    be on its way when its response is complete)."""
    return next(s for s in feed(http) if not s["running"] and not s["waiting"])


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_the_openai_client_gets_engine_generate_s_tokens_streamed_and_not(
        server, client, engine, tokenizer, model):
    assert [m.id for m in client.models.list()] == [model.name]
    question = "Name a colour."
    (want,) = solo(engine, tokenizer, [chat_ids(tokenizer, question)])
    assert len(want) == NEW, "one printable character per token"

    r = client.chat.completions.create(model=model.name, messages=user(question), max_tokens=NEW)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (want, "length")
    chunks = list(client.chat.completions.create(model=model.name, messages=user(question),
                                                 max_tokens=NEW, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want
    assert chunks[-1].choices[0].finish_reason == "length"

    text = "Once upon a time"
    (want,) = solo(engine, tokenizer, [tokenizer.encode(text)])
    stream = client.completions.create(model=model.name, prompt=text, max_tokens=NEW,
                                       stream=True)
    assert "".join(c.choices[0].text for c in stream) == want
    r = client.completions.create(model=model.name, prompt=tokenizer.encode(text),
                                  max_tokens=NEW)
    assert r.choices[0].text == want, "a prompt of token ids is the same prompt"


def test_include_usage_counts_the_prompt_and_the_answer_in_tokens(client, tokenizer, model):
    question = "Count me."
    chunks = list(client.chat.completions.create(
        model=model.name, messages=user(question), max_tokens=5, stream=True,
        stream_options={"include_usage": True}))
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and all(c.usage is None for c in chunks[:-1])
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
        len(chat_ids(tokenizer, question)), 5, len(chat_ids(tokenizer, question)) + 5)
    r = client.chat.completions.create(model=model.name, messages=user(question), max_tokens=5)
    assert r.usage == usage


def test_a_stop_string_across_tokens_ends_the_text_at_its_first_character(
        client, engine, tokenizer, model):
    question = "What is 2+2?"
    (whole,) = solo(engine, tokenizer, [chat_ids(tokenizer, question)], max_new_tokens=16)
    assert len(set(whole)) >= 5, "the answer must vary for a stop string to mean anything"
    stop = whole[5:8]  # three tokens
    want = whole[:whole.index(stop)]
    stops = ["never in the answer", stop]
    r = client.chat.completions.create(model=model.name, messages=user(question),
                                       max_tokens=16, stop=stops)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (want, "stop")
    chunks = list(client.chat.completions.create(model=model.name, messages=user(question),
                                                 max_tokens=16, stop=stops, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == want
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_seeded_sampling_repeats_and_draws_what_the_engine_draws(
        client, engine, tokenizer, model):
    question = "Pick a word."
    settings = dict(temperature=0.9, top_p=0.95, seed=11)
    extra = dict(top_k=40, min_p=0.01)
    (want,) = solo(engine, tokenizer, [chat_ids(tokenizer, question)], **settings, **extra)
    answers = [client.chat.completions.create(
        model=model.name, messages=user(question), max_tokens=NEW, **settings,
        extra_body=extra).choices[0].message.content for _ in range(2)]
    assert answers == [want, want]
    other = client.chat.completions.create(model=model.name, messages=user(question),
                                           max_tokens=NEW, **{**settings, "seed": 12},
                                           extra_body=extra).choices[0].message.content
    assert other != want


def test_64_concurrent_streams_each_get_their_own_prompt_s_tokens_and_the_engine_ends_empty(
        server, engine, tokenizer, model):
    questions = [f"Request {i}: {'abcdefghij'[i % 10] * (1 + i % 5)}?" for i in range(64)]
    lengths = [2 + i % 7 for i in range(64)]
    want = {}
    for n in set(lengths):
        mine = [i for i in range(64) if lengths[i] == n]
        texts = solo(engine, tokenizer, [chat_ids(tokenizer, questions[i]) for i in mine],
                     max_new_tokens=n)
        want.update(zip(mine, texts))
    with httpx.Client(base_url=server.url, timeout=60) as http:
        before = idle(http)

        async def ask(c, i):
            stream = await c.chat.completions.create(
                model=model.name, messages=user(questions[i]), max_tokens=lengths[i],
                stream=True, stream_options={"include_usage": True})
            chunks = [chunk async for chunk in stream]
            return ("".join(c.choices[0].delta.content or "" for c in chunks if c.choices),
                    chunks[-1].usage.completion_tokens)

        async def everyone():
            async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="none",
                                          max_retries=0, timeout=120) as c:
                return await asyncio.gather(*(ask(c, i) for i in range(64)))

        got = asyncio.run(everyone())
        assert [text for text, _ in got] == [want[i] for i in range(64)]
        assert [n for _, n in got] == lengths
        after = idle(http)
    assert after["finished"].get("length", 0) - before["finished"].get("length", 0) == 64
    assert after["tables"] == {} and after["pool"]["num_used"] == 0


BAD = {  # what each sends (a JSON body, or raw bytes), the status it gets, the param it names
    "invalid JSON": (b'{"model": "x", "messages": [', 400, None),
    "unknown model": ({"model": "gpt-4o", "messages": user("hi")}, 404, "model"),
    "max_tokens past the context": ({"messages": user("hi"), "max_tokens": CONTEXT}, 400,
                                    "max_tokens"),
    "negative temperature": ({"messages": user("hi"), "temperature": -0.5}, 400, "temperature"),
    "n above 1": ({"messages": user("hi"), "n": 2}, 400, "n"),
    "a prompt the pool cannot hold": ({"prompt": list(range(40, 150))}, 400, None),
    "a body of the wrong shape": ({"messages": "hi"}, 422, "messages"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_input_gets_its_status_and_a_json_error_and_leaves_nothing_behind(
        server, model, case):
    body, status, param = BAD[case]
    path = "/v1/completions" if isinstance(body, dict) and "prompt" in body else \
        "/v1/chat/completions"
    refused = f'torchlet_requests_refused_total{{status="{status}"}}'
    with httpx.Client(base_url=server.url, timeout=60) as http:
        before, count = idle(http), metric(server.url, refused)
        if isinstance(body, dict):
            r = http.post(path, json={"model": model.name, "max_tokens": 4, **body})
        else:
            r = http.post(path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert error["message"] and error["type"] == "invalid_request_error"
        assert error["param"] == param, error
        after = next(feed(http))
    assert metric(server.url, refused) == count + 1
    assert {k: after[k] for k in ("waiting", "running", "finished", "tables", "pool")} == \
        {k: before[k] for k in ("waiting", "running", "finished", "tables", "pool")}
    if case == "max_tokens past the context":
        assert error["code"] == "context_length_exceeded"


def content(lines) -> str:
    """Reads a raw chat stream's lines until its first text; returns it."""
    for line in lines:
        if line.startswith("data: {"):
            delta = json.loads(line[6:])["choices"][0]["delta"]
            if delta.get("content"):
                return delta["content"]
    raise AssertionError("the stream ended without text")


def test_a_client_that_goes_is_aborted_before_the_next_step_and_its_blocks_freed(
        slow_server, engine, tokenizer, model):
    """Two requests run; one client closes its stream after its first token. The engine
    thread aborts that request before the next step: by the time the other, 6 tokens long,
    has finished, the closed one has left the engine with its blocks, as aborted."""
    kept, gone = "Keep going.", "I am leaving."
    (want,) = solo(engine, tokenizer, [chat_ids(tokenizer, kept)], interpret=True,
                   max_new_tokens=6)
    url = slow_server.url
    aborted = 'torchlet_requests_finished_total{reason="aborted"}'
    with httpx.Client(base_url=url, timeout=120) as http:
        events = feed(http)
        before = next(events)
        count = metric(url, aborted)
        ask = dict(model=model.name, stream=True)
        with http.stream("POST", "/v1/chat/completions",
                         json={**ask, "messages": user(kept), "max_tokens": 6}) as k:
            assert k.status_code == 200, k.read()
            kept_id = int(k.headers["x-torchlet-request-id"])
            with http.stream("POST", "/v1/chat/completions",
                             json={**ask, "messages": user(gone), "max_tokens": 80}) as g:
                assert g.status_code == 200, g.read()
                gone_id = int(g.headers["x-torchlet-request-id"])
                content(g.iter_lines())  # it runs: its first token came
            lines = k.iter_lines()
            text = content(lines) + "".join(
                json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                for line in lines if line.startswith("data: {"))
        assert text == want, "the other stream is not affected"
        after = next(s for s in events if kept_id not in s["running"] + s["waiting"]
                     and s["step"] > before["step"])
    assert gone_id not in after["running"] + after["waiting"]
    assert str(gone_id) not in after["tables"], "the aborted request still holds blocks"
    assert after["finished"].get("aborted", 0) == before["finished"].get("aborted", 0) + 1
    assert after["pool"]["num_used"] == 0
    assert metric(url, aborted) == count + 1


def test_sigterm_ends_every_running_request_with_an_error_chunk_and_exits_0(slow_server, model):
    with httpx.Client(base_url=slow_server.url, timeout=120) as http:
        streams = [http.stream("POST", "/v1/chat/completions",
                               json={"model": model.name, "messages": user(f"Wait {i}."),
                                     "max_tokens": 80, "stream": True}) for i in range(3)]
        lines = [s.__enter__().iter_lines() for s in streams]
        for each in lines[:2]:  # two lanes: these two run, the third waits
            content(each)
        slow_server.proc.send_signal(signal.SIGTERM)
        for each in lines:
            data = [line[6:] for line in each if line.startswith("data: ")]
            assert data[-1] == "[DONE]"
            error = json.loads(data[-2])["error"]
            assert error["type"] == "server_error" and "shutting down" in error["message"]
        for s in streams:
            s.__exit__(None, None, None)
    assert slow_server.proc.wait(60) == 0, "".join(slow_server.log)


@pytest.mark.needs(REQUEST_STATES)
def test_every_version_with_the_step_api_serves_through_the_engine_thread(impl):
    """The worker alone, in this process, on the tiny fixture: three requests at once through
    the queue, each getting engine.generate's tokens, and the engine left empty."""
    import threading

    from spec.support.models import tiny_checkpoint
    from torchlet.serve.worker import Job, Worker

    ckpt = tiny_checkpoint("tiny_qwen2")
    prompts = [[5, 6, 7], [9, 8, 7, 6, 5], [11]]
    params = GenerationParams(max_new_tokens=4, ignore_eos=True)
    options = cli.serving_options(impl, "cpu")
    want = build_sized(impl, ckpt, max_model_len=32, max_running=4, **options).generate(
        prompts, params)
    engine = build_sized(impl, ckpt, max_model_len=32, max_running=4, **options)
    worker = Worker(engine, impl.capabilities)
    got = [[] for _ in prompts]
    ends = [threading.Event() for _ in prompts]

    def emit(i):
        def to(event):
            if event[0] == "tokens":
                got[i].extend(event[1])
            elif event[0] in ("end", "refused"):
                got[i].append(event[1])
                ends[i].set()
        return to

    worker.start()
    try:
        for i, p in enumerate(prompts):
            worker.submit(Job(p, params, emit(i)))
        assert all(e.wait(60) for e in ends)
    finally:
        worker.stop("done")
        worker.join(60)
    assert got == [w + ["length"] for w in want]
    assert not engine.has_unfinished()
