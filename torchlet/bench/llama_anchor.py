"""llama.cpp beside `bench main-job`'s rows: an anchor, not a contestant.

llama-cpp-python (the optional extra `torchlet[llama]`) answers the same prompt ids from the same
GGUF file that the main job converts, greedy, the same number of new tokens, eos never consulted,
with as many threads as the torch rows of its thread count. It computes on the file's own weights
(Q4_1 for the default model) where the other rows compute on their float32 conversion, so its
ids are compared with HF's and reported, never required to match. Without the module, or without
a GGUF file, or off the CPU, there is no row, only a note saying why.
"""
from __future__ import annotations

import time
from pathlib import Path

from .contender import Contender

NAME = "llama.cpp"
INSTALL = "pip install 'torchlet[llama]', which builds llama-cpp-python from source"


def gguf_of(model: str | None) -> Path | None:
    """The GGUF file --model names (None: the packaged one), or None for a checkpoint directory."""
    from torchlet.gguf_model import gguf_path

    if model is None:
        return gguf_path()
    return None if Path(model).is_dir() else Path(model).resolve()


def skip_reason(gguf: Path | None, device: str) -> str | None:
    """Why the anchor has no row in this run, or None when it can have one."""
    if not device.startswith("cpu"):
        return f"No llama.cpp row: it is the CPU's anchor and this run is on {device}."
    if gguf is None:
        return "No llama.cpp row: --model is a checkpoint directory, not a GGUF file."
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return f"No llama.cpp row: llama-cpp-python is not installed ({INSTALL})."
    return None


def llama_contender(gguf: Path, ids: list[int], n: int, threads: int):
    """A main-job Contender that runs llama.cpp on `gguf` with `threads` threads."""
    import llama_cpp

    from torchlet.gguf_model import open_gguf, quantization

    # n_batch at least the prompt: one decode call prefills it, as the torch rows do
    llm = llama_cpp.Llama(model_path=str(gguf), n_threads=threads, n_threads_batch=threads,
                          n_ctx=len(ids) + n, n_batch=max(512, len(ids)), seed=0, verbose=False)
    dtype = quantization(open_gguf(gguf)) or "its own"

    def run(ids=ids):
        # the previous round's K/V would serve the prompt from its cache: forget it
        llm.reset()
        out, first, last = [], 0.0, 0.0
        start = time.perf_counter()
        tokens = llm.generate(list(ids), temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                              repeat_penalty=1.0)
        for token in tokens:  # generate never stops at eos itself: its caller would
            last = time.perf_counter()
            first = first or last
            out.append(int(token))
            if len(out) == n:
                break
        tokens.close()
        return out, first - start, last - start

    version = getattr(llama_cpp, "__version__", "?")
    return Contender(NAME, f"anchor: llama-cpp-python {version}, {dtype} weights, n_threads "
                           f"{threads}", run, extra={"anchor": True, "weights": dtype})
