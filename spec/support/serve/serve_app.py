"""`torchlet serve`'s app in the specs' own process: uvicorn in a thread on a free loopback port
(InProcess), over an engine whose steps the spec may hold (Paced).

In-process, a server costs its engine (milliseconds on the tiny model), not a child's imports
and model load (about 5 s), and a harness mutant's edited torchlet/serve (spec/mutants/) is
what runs: torchlet.serve is imported when a server is made, never when this module is.
"""
from __future__ import annotations

import signal
import threading


class Paced:
    """An engine (any step-API version) whose steps, while held, wait for the spec to let them
    run: a request stays running for as long as the spec needs, on any machine, with no
    sleeping. Everything else is the engine's own. `steps` holds, for each step that ran, the
    ids that got tokens in it: what the engine was asked to compute; `tables`, where the version
    pages, the block tables it left (block_tables(), read in the engine's thread)."""

    def __init__(self, engine):
        self.engine = engine
        self.ready = threading.Condition()
        self.allowed: int | None = None  # steps that may still run; None: no limit
        self.started = self.done = 0
        self.steps: list[set[int]] = []
        self.tables: list[dict] = []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def step(self):
        with self.ready:
            self.started += 1
            self.ready.notify_all()
            self.ready.wait_for(lambda: self.allowed is None or self.allowed > 0)
            if self.allowed is not None:
                self.allowed -= 1
        outputs = self.engine.step()
        tables = getattr(self.engine, "block_tables", None)
        with self.ready:
            self.steps.append({o.request_id for o in outputs if o.tokens})
            if tables is not None:
                self.tables.append(tables())
            self.done += 1
            self.ready.notify_all()
        return outputs

    def hold(self) -> None:
        with self.ready:
            self.allowed = 0

    def release(self) -> None:
        with self.ready:
            self.allowed = None
            self.ready.notify_all()

    def advance(self, timeout: float = 60) -> None:
        """Lets one step run, once the engine has one to run, and returns when it has."""
        with self.ready:
            if not self.ready.wait_for(lambda: self.started > self.done, timeout):
                raise AssertionError("the engine never began a step")
            target = self.done + 1
            self.allowed += 1
            self.ready.notify_all()
            if not self.ready.wait_for(lambda: self.done >= target, timeout):
                raise AssertionError("the step never ended")

    def held(self, request_id: int) -> list[int]:
        """The request's block table after the last step that left it holding blocks. For a
        request that ran to its end, every block it filled is in it: the step that ends it
        writes one more token, into a block the table has or a new, partial one."""
        return next(t[request_id] for t in reversed(self.tables) if request_id in t)

    def tokens(self, request_id: int, since: int = 0) -> int:
        """Steps (from the since-th on) that gave the request a token."""
        return sum(request_id in ids for ids in self.steps[since:])


class InProcess:
    """One server: `url` at once (the socket listens before uvicorn runs; a client's first
    request waits in its backlog). stop() shuts it down as SIGTERM does. most: the requests it
    holds at once, running and waiting (--max-running + --max-waiting)."""

    def __init__(self, engine, version, tokenizer, config, name: str, context: int,
                 most: int = 256):
        from torchlet.serve.app import create_app
        from torchlet.serve.launch import listen, serve_engine, uvicorn_server

        self.served = serve_engine(engine, version, tokenizer, config, name, context, most)
        self.sock = listen("127.0.0.1", 0)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.server = uvicorn_server(self.served, create_app(self.served))
        self.served.worker.start()
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="uvicorn", daemon=True)
        self.thread.start()

    def sigterm(self) -> None:
        """What uvicorn's handler of SIGTERM does (a signal reaches only the main thread)."""
        self.server.handle_exit(signal.SIGTERM, None)

    def stop(self) -> None:
        self.sigterm()
        self.thread.join(30)
        self.served.worker.join(30)
        self.sock.close()
        assert not self.thread.is_alive() and not self.served.worker.thread.is_alive(), \
            "the server did not stop"
