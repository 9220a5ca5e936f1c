"""Everything `torchlet serve` does before and after uvicorn runs: refuse what the user got
wrong (before the model loads, the port first), build the engine sized for serving, and shut
down with status 0 on SIGTERM."""
from __future__ import annotations

import gc
import signal
import socket

import uvicorn

from torchlet import running
from torchlet.checkpoints import load_hf_dir
from torchlet.contract import (NUM_BLOCKS, QUANTIZED_WEIGHTS, REQUEST_STATES, SAMPLING,
                               STRUCTURED_OUTPUT, TorchletError)
from torchlet.engines import build_sized
from torchlet.gguf_model import resolve_model
from torchlet.serve.app import Model, Served, create_app
from torchlet.serve.metrics import Metrics
from torchlet.serve.worker import Worker
from torchlet.text import load_tokenizer, stop_ids


def listen(host: str, port: int) -> socket.socket:
    if not 0 <= port <= 65535:
        raise TorchletError(f"--port must be in 0..65535, got {port}")
    try:
        return socket.create_server((host, port))
    except OSError as e:
        raise TorchletError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


class Launch:
    """`torchlet serve` with its parsed flags; default_max_len: the longest prompt + answer
    when --max-model-len is not given and the model's context is longer."""

    def __init__(self, args, default_max_len: int):
        for flag, least in (("max_running", 1), ("max_model_len", 1), ("num_blocks", 1),
                            ("max_waiting", 0)):
            value = getattr(args, flag)
            if value is not None and value < least:
                raise TorchletError(f"--{flag.replace('_', '-')} must be at least {least}, got "
                                    f"{value}")
        self.device = running.resolve_device(args.device)
        self.threads = running.set_threads(args.threads)
        self.interpret = args.triton_interpret
        # the newest version that samples, unless --impl names one: most OpenAI clients and
        # chat pages send a temperature, and a greedy default would refuse them all
        self.version = running.pick_version(args.impl, args.impl_root, self.device,
                                            need=(SAMPLING, *running.speculation_needs(args)),
                                            interpret=args.triton_interpret)
        if REQUEST_STATES not in self.version.capabilities:
            raise TorchletError(f"{self.version.name} has no step API (request_states): serve "
                                f"needs v03 or later")
        speculation = running.speculation_options(args, self.version)
        quantize = running.quantize_options(args, self.version)
        sizing = {}
        if args.num_blocks is not None:
            option = self.version.option_for(NUM_BLOCKS)
            if option is None:
                raise TorchletError(f"--num-blocks: {self.version.name} has no block pool "
                                    f"(paged_kv, v08 and later)")
            sizing[option.name] = args.num_blocks
        self.sock = listen(args.host, args.port)
        model_dir, name = resolve_model(args.model, progress=True)
        name = name.split(" (")[0]  # "SmolLM2-135M-Instruct (Q4_1 GGUF)": the model, as an id
        # the GGUF blocks as stored, where the version reads them (v18)
        checkpoint = load_hf_dir(model_dir,
                                 quantized=QUANTIZED_WEIGHTS in self.version.capabilities)
        tokenizer = load_tokenizer(model_dir)
        config = checkpoint.config
        context = min(config.max_position, args.max_model_len or default_max_len)
        self.proposer = ""  # the banner's words for a proposer other than ngram
        if speculation:
            speculation["proposer"], self.proposer = running.load_proposer(args.proposer,
                                                                           checkpoint)
        self.serving = {**running.serving_options(self.version, self.device), **speculation,
                        **quantize}
        self.weights = running.weights_label(self.version, checkpoint, self.serving)
        with running.kernels_off(self.device, self.interpret):  # the layers choose at build
            engine = build_sized(self.version, checkpoint, device=self.device,
                                 dtype=running.resolve_dtype(args.dtype, self.device),
                                 max_model_len=context, max_running=args.max_running,
                                 **self.serving, **sizing)
        self.served = serve_engine(engine, self.version, tokenizer, config, name, context,
                                   args.max_running + args.max_waiting, self.device,
                                   self.interpret)
        self.worker, self.model = self.served.worker, self.served.model
        self.app = create_app(self.served)

    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host if ':' not in host else f'[{host}]'}:{port}"

    def banner(self) -> str:
        mode = running.run_mode(self.version, self.device, self.serving, self.interpret,
                                self.proposer)
        if self.weights:
            mode += f", {self.weights}"
        return (f"[{self.version.name} on {self.device}{mode}, {self.threads}, {self.model.name}, "
                f"context {self.model.context}] serving on {self.url()}")

    def run(self) -> int:
        server = uvicorn_server(self.served, self.app)
        # uvicorn raises the signal it handled again once it has shut down; with the default
        # handler SIGTERM would then kill the process. This shutdown is ours: exit status 0.
        before = signal.signal(signal.SIGTERM, lambda *_: None)
        # What is alive once the model is loaded (the engine, the weights' wrappers, the
        # tokenizer, every import) frozen out of the collector's scans: a full collection while
        # serving then scans only what serving made. Over an engine's objects one took 80-110
        # ms in the benches, a stall of every stream (docs/perf-notes.md).
        gc.collect()
        gc.freeze()
        self.worker.start()
        try:
            server.run(sockets=[self.sock])
        finally:
            signal.signal(signal.SIGTERM, before)
            self.worker.stop("the server stopped")
            self.worker.join(timeout=30)
            self.sock.close()
        return 0


def serve_engine(engine, version, tokenizer, config, name: str, context: int, most: int,
                 device: str = "cpu", interpret: bool = False) -> Served:
    """The app's state over a built engine (not started): its worker, what it serves, its
    metrics, the most requests it holds at once (running and waiting). The specs build theirs
    with it too."""
    metrics = Metrics()
    worker = Worker(engine, version.capabilities, metrics,
                    context=lambda: running.kernels_off(device, interpret))
    model = Model(name, version.name, tokenizer, context, config.vocab_size,
                  stop_ids(tokenizer, config.eos_token_ids), SAMPLING in version.capabilities,
                  STRUCTURED_OUTPUT in version.capabilities)
    return Served(worker, model, metrics, most)


def uvicorn_server(served: Served, app) -> uvicorn.Server:
    """uvicorn over the app; a signal to exit (SIGTERM, Ctrl-C) first ends every request."""

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            served.begin_shutdown()
            super().handle_exit(sig, frame)

    return Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
