"""The HTTP side: a FastAPI app over a Worker (worker.py).

A handler checks the request (protocol.py), hands a Job to the worker and awaits its events on
an asyncio queue, which the engine thread fills through loop.call_soon_threadsafe. A refusal
by the engine (add_request's RequestError) is a 400 and leaves nothing queued. A stream that the
client drops is cancelled by Starlette; its `finally` aborts the request, which the engine
thread takes before its next step. Shutdown (begin_shutdown) ends every request with an error
and every page feed, so that uvicorn's graceful exit has nothing left to wait for.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse

from torchlet.serve import protocol, structured
from torchlet.serve.metrics import Metrics
from torchlet.serve.protocol import ApiError, ChatRequest, CompletionRequest
from torchlet.serve.worker import Job, Worker
from torchlet.text import StreamDecoder

PAGE_FILES = {"page.js": "text/javascript", "page.css": "text/css"}


@dataclass
class Model:
    """What the app knows of what it serves."""

    name: str          # the id /v1/models lists and requests must name
    version: str       # the Torchlet version
    tokenizer: object
    context: int       # the longest prompt + answer the engine was built for
    vocab_size: int
    eos_ids: tuple[int, ...]
    samples: bool      # the version has the sampling capability
    structured: bool = False  # the version applies a grammar (structured_output)


class Served:
    """The app's state: the worker, the model, the metrics, the page feeds, and how many
    requests the engine holds (`queued`: added and not yet ended or refused), at most `most`."""

    def __init__(self, worker: Worker, model: Model, metrics: Metrics, most: int):
        self.worker, self.model, self.metrics = worker, model, metrics
        self.most, self.queued = most, 0
        self.grammars = structured.Grammars(model.tokenizer, model.vocab_size, model.eos_ids)
        metrics.worker = worker
        self.loop: asyncio.AbstractEventLoop | None = None
        self.feeds: set[asyncio.Event] = set()
        self.closing = False
        worker.listeners.append(self._changed)

    def _changed(self, snapshot: dict) -> None:  # in the engine thread
        self.call(self._wake)

    def call(self, *what) -> None:
        """From the engine thread: what, soon, in the event loop, unless that has closed
        (uvicorn has stopped: nobody is left to tell)."""
        if self.loop is not None:
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(*what)

    def _wake(self) -> None:
        for feed in self.feeds:
            feed.set()

    def begin_shutdown(self) -> None:
        """From a signal handler: end the requests (the engine thread sends their ends), then
        the page feeds."""
        self.closing = True
        self.worker.stop("the server is shutting down")
        self.call(self._wake)

    def submit(self, prompt: list[int], params) -> tuple[Job, asyncio.Queue]:
        """Back-pressure: past `most` requests a new one is refused (429) before it queues, so
        that a burst waits in its clients, which retry, not in the server's memory."""
        if self.queued >= self.most:
            raise ApiError(429, f"the server holds {self.most} requests, its most (--max-running "
                                f"+ --max-waiting): try again later", kind="rate_limit_error",
                           code="too_many_requests")
        events: asyncio.Queue = asyncio.Queue()
        job = Job(prompt, params, lambda e: self.call(self._event, events, e))
        self.queued += 1
        self.worker.submit(job)
        return job, events

    def _event(self, events: asyncio.Queue, event: tuple) -> None:  # in the event loop
        if event[0] in ("end", "refused"):  # the worker ends each job with one of these
            self.queued -= 1
        events.put_nowait(event)


def create_app(served: Served) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app):
        served.loop = asyncio.get_running_loop()
        yield

    app = FastAPI(title="torchlet serve", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)
    model = served.model

    @app.exception_handler(ApiError)
    async def refused(request: Request, e: ApiError):
        served.metrics.refused(e.status)
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(404)
    async def not_found(request: Request, e):
        return JSONResponse(ApiError(404, f"no such path: {request.url.path}").body(), 404)

    @app.exception_handler(405)
    async def wrong_method(request: Request, e):
        return JSONResponse(ApiError(405, f"{request.method} is not allowed on "
                                          f"{request.url.path}").body(), 405)

    @app.get("/health")
    async def health():
        if served.closing:
            return JSONResponse({"status": "shutting down"}, status_code=503)
        return {"status": "ok", "version": model.version, "model": model.name}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model.name, "object": "model", "created": 0,
                                            "owned_by": f"torchlet {model.version}"}]}

    @app.get("/metrics")
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(served.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await complete(served, protocol.parse(await request.body(), ChatRequest), request)

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = protocol.parse(await request.body(), CompletionRequest)
        return await complete(served, body, request)

    @app.get("/engine/state")
    async def state():
        return served.worker.snapshot

    @app.get("/engine/events")
    async def events():
        return StreamingResponse(feed(served), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(_page("index.html"))

    @app.get("/favicon.ico")
    async def favicon():  # none: an empty answer, so that browsers log no 404
        return Response(status_code=204)

    @app.get("/page/{name}")
    async def page_file(name: str):
        if name not in PAGE_FILES:
            raise ApiError(404, f"no such file: {name}")
        return Response(_page(name), media_type=PAGE_FILES[name])

    return app


def _page(name: str) -> str:
    return resources.files("torchlet.serve").joinpath("page", name).read_text(encoding="utf-8")


async def feed(served: Served) -> AsyncIterator[str]:
    """The page's feed: the latest snapshot whenever the engine thread makes one (those made
    while one is being sent are coalesced)."""
    wake = asyncio.Event()
    served.feeds.add(wake)
    try:
        while True:
            yield f"data: {json.dumps(served.worker.snapshot)}\n\n"
            if served.closing:
                return
            await wake.wait()
            wake.clear()
    finally:
        served.feeds.discard(wake)


async def complete(served: Served, body, request: Request):
    """Either endpoint: checks, queues, then answers as one JSON or as a stream of chunks."""
    model = served.model
    if served.closing:
        raise ApiError(503, "the server is shutting down", kind="server_error")
    if body.model != model.name:
        raise ApiError(404, f"the model {body.model!r} does not exist: this server serves "
                            f"{model.name!r} (GET /v1/models)", param="model",
                       code="model_not_found")
    stop_strings = protocol.stops(body)
    asked = structured.constraint(body, model.version, model.structured)
    # in a thread: a long prompt's tokenizing (seconds for megabytes) must not hold up the
    # event loop, and with it every other client
    prompt = await asyncio.to_thread(protocol.prompt_of, body, model.tokenizer,
                                     model.vocab_size)
    settings = protocol.params(body, len(prompt), model.context, model.eos_ids, model.samples,
                               model.version)
    if asked is not None:  # compiled before anything is queued; in a thread, as the prompt
        grammar = await asyncio.to_thread(served.grammars.compile, *asked)
        settings = dataclasses.replace(settings, grammar=grammar)
    job, events = served.submit(prompt, settings)
    first = await events.get()
    if first[0] == "refused":
        raise ApiError(400, first[1])
    if first[0] == "end":  # stopped before it was queued
        raise ApiError(503, first[2] or "the server is shutting down", kind="server_error")
    chat = isinstance(body, ChatRequest)
    answer = Answer(served, job, events, model.tokenizer, stop_strings, chat)
    if body.stream:
        usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(answer.chunks(usage), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **answer.headers()})
    whole = asyncio.ensure_future(answer.whole())
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({whole, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        served.worker.cancel(job)  # a no-op once it ended; aborts it if the client went
    if not whole.done():
        whole.cancel()
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it
    text, reason = whole.result()  # or its ApiError
    return JSONResponse(answer.response(text, reason), headers=answer.headers())


async def _disconnected(request: Request) -> None:
    """Returns when the client goes (the body is read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class Answer:
    """One request's tokens as text, and the OpenAI objects that carry it."""

    def __init__(self, served: Served, job: Job, events: asyncio.Queue, tokenizer, stops, chat):
        self.served, self.job, self.events, self.chat = served, job, events, chat
        self.decoder = StreamDecoder(tokenizer)
        self.text = protocol.StopText(stops)
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.error: str | None = None
        self.count = 0  # tokens received, those after a stop string's included

    async def pieces(self) -> AsyncIterator[tuple[str, str | None]]:
        """(text, None) as it comes, then ("", finish reason), or ("", None) with self.error
        set. A stop string ends the request in the engine too."""
        pending = None
        while True:
            event, pending = pending or await self.events.get(), None
            if event[0] == "tokens":
                tokens = list(event[1])
                # A stream that fell behind the engine takes every token already waiting as one
                # piece: the event loop's work (text, a chunk, a write) then goes per piece, not
                # per token, so many streams at once cost the loop what the engine makes.
                while not self.events.empty():
                    event = self.events.get_nowait()
                    if event[0] != "tokens":
                        pending = event
                        break
                    tokens += event[1]
                self.count += len(tokens)
                shown = "".join(self.decoder.push(t) for t in tokens)
                shown = self.text.push(shown)
                if shown:
                    yield shown, None
                if self.text.stopped:
                    self.served.worker.cancel(self.job, "stop")
                    yield "", "stop"
                    return
            elif event[0] == "end":
                _, reason, error = event
                if reason in ("stop", "length"):
                    rest = self.text.push(self.decoder.flush())
                    rest += "" if self.text.stopped else self.text.flush()
                    if rest:
                        yield rest, None
                    yield "", reason
                else:
                    self.error = error or f"the request ended: {reason}"
                    yield "", None
                return

    async def whole(self) -> tuple[str, str | None]:
        parts, reason = [], None
        async for text, reason in self.pieces():
            parts.append(text)
        if self.error:
            status = 503 if self.served.closing else 500
            raise ApiError(status, self.error, kind="server_error")
        return "".join(parts), reason

    def headers(self) -> dict[str, str]:
        """The engine's id of the request, as the page and /engine/state show it."""
        return {"x-torchlet-request-id": str(self.job.request_id)}

    def usage(self) -> dict:
        return protocol.usage(len(self.job.prompt), self.count)

    def response(self, text: str, reason: str) -> dict:
        choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                   "finish_reason": reason, "logprobs": None} if self.chat else
                  {"index": 0, "text": text, "finish_reason": reason, "logprobs": None})
        return {"id": self.id, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.created, "model": self.served.model.name, "choices": [choice],
                "usage": self.usage()}

    def chunk(self, text: str | None, reason: str | None, usage: bool, role: bool = False):
        if self.chat:
            delta = {"role": "assistant", "content": ""} if role else (
                {} if text is None else {"content": text})
            choice = {"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}
        else:
            choice = {"index": 0, "text": text or "", "finish_reason": reason, "logprobs": None}
        out = {"id": self.id, "object": "chat.completion.chunk" if self.chat else
               "text_completion", "created": self.created, "model": self.served.model.name,
               "choices": [choice]}
        if usage:
            out["usage"] = None
        return f"data: {json.dumps(out)}\n\n"

    async def chunks(self, usage: bool) -> AsyncIterator[str]:
        """The stream: (chat: a first chunk with the role,) text chunks, one with the finish
        reason, with include_usage one with the counts, then [DONE]; an error chunk instead
        of the finish when the request fails or the server shuts down."""
        try:
            if self.chat:
                yield self.chunk(None, None, usage, role=True)
            async for text, reason in self.pieces():
                if text:
                    yield self.chunk(text, None, usage)
                elif reason:
                    yield self.chunk(None, reason, usage)
            if self.error:
                kind = 503 if self.served.closing else 500
                body = ApiError(kind, self.error, kind="server_error").body()
                yield f"data: {json.dumps(body)}\n\n"
            elif usage:
                out = {"id": self.id, "object": "chat.completion.chunk" if self.chat else
                       "text_completion", "created": self.created,
                       "model": self.served.model.name, "choices": [], "usage": self.usage()}
                yield f"data: {json.dumps(out)}\n\n"
            yield "data: [DONE]\n\n"
        finally:  # the client went, or the stream ended: abort it if it still runs
            self.served.worker.cancel(self.job)
