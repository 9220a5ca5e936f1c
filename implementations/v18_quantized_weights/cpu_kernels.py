"""The CPU's quantized matrix product: csrc/qlinear.cpp, built once per machine with
torch.utils.cpp_extension and registered as the torch op `torchlet_q::linear`.

It is compiled with -march=native (AVX512 where the machine has it, a portable loop where not),
so the build lives in this machine's cache (TORCHLET_CACHE_DIR, else ~/.cache/torchlet, as the
harness's model cache), under extensions/, keyed by torch's version. A missing compiler or a
failed build leaves `available()` False and `linear` dequantizing for F.linear: slower, same
numbers; the caller decides whether to say so.

    python -m implementations.v18_quantized_weights.cpu_kernels    # build it (setup.sh)"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from torchlet.contract import QuantizedTensor

SOURCE = Path(__file__).resolve().parent / "csrc" / "qlinear.cpp"
# -ffp-contract=off: the kernel rounds each weight as QuantizedTensor.dequantize does (a product,
# then a sum); fusing them into one FMA would change the weights' last bits.
FLAGS = ["-O3", "-march=native", "-ffp-contract=off"]

build_seconds: float | None = None   # what the last build (or load of a cached one) took
build_error: str | None = None       # why the extension is unavailable, when it is
_state: bool | None = None           # None: not tried yet


def build_dir() -> Path:
    """This machine's build directory (the torchlet cache, computed here: versions import only
    torch and torchlet.contract)."""
    root = os.environ.get("TORCHLET_CACHE_DIR") or (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchlet")
    return Path(root) / "extensions" / ("qlinear_torch" + re.sub(r"\W", "_", torch.__version__))


def build(verbose: bool = False) -> bool:
    """Compile (or load the cached build of) the extension; True when its op is registered."""
    global _state, build_seconds, build_error
    from torch.utils import cpp_extension

    start = time.perf_counter()
    if registered():  # another copy of this module (a tree of versions) loaded it already
        _state, build_error, build_seconds = True, None, 0.0
        return True
    try:
        where = build_dir()
        where.mkdir(parents=True, exist_ok=True)
        cpp_extension.load(name="torchlet_qlinear", sources=[str(SOURCE)],
                           extra_cflags=FLAGS, build_directory=str(where),
                           is_python_module=False, verbose=verbose)
        _state, build_error = True, None
    except Exception as e:  # no compiler, a failed build, an unwritable cache: fall back
        last = (str(e).strip().splitlines() or [""])[-1]
        _state, build_error = False, f"{type(e).__name__}: {last}"
    build_seconds = time.perf_counter() - start
    return _state


def registered() -> bool:
    """Whether the op is in this process: a library registers its namespace once."""
    try:
        torch.ops.torchlet_q.linear
    except (AttributeError, RuntimeError):
        return False
    return True


def available() -> bool:
    """Whether the compiled op can run here (builds it on the first call if no one has)."""
    return build() if _state is None else _state


def linear(x: torch.Tensor, w: QuantizedTensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., K] @ w.T (+ bias), x float32 on the CPU, from the integers as stored; anything
    else (or no extension) through the dequantized matrix."""
    if x.dtype == torch.float32 and x.device.type == "cpu" and available():
        return torch.ops.torchlet_q.linear(x, w.q, w.scales, w.zeros, w.mins, w.bits, w.group,
                                           bias)
    return F.linear(x, w.dequantize().to(x.dtype), bias)


if __name__ == "__main__":
    ok = build()
    print(f"torchlet_q::linear {'ready' if ok else 'unavailable'} in {build_seconds:.1f} s "
          f"(built or loaded from {build_dir()})" + ("" if ok else f": {build_error}"))
