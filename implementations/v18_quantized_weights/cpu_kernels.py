"""The CPU's C++ ops, built once per machine with torch.utils.cpp_extension into one library
that registers them in the torch namespace `torchlet_q`: the quantized matrix product `linear`
(csrc/qlinear.cpp), and the steps of a layer between products that PyTorch runs as many small
ops (csrc/layers.cpp: rms_norm, add_rms_norm, rope_split; csrc/attention.cpp: store_kv and
paged_decode_attention over v08's paged cache). The functions below call them; the model runs
the layers' ops where `takes` says they run (model.py: QuantizedOps.cpu_layers, CpuAttention).

It is compiled with -march=native (AVX512 where the machine has it, a portable loop where not),
so the build lives in this machine's cache (TORCHLET_CACHE_DIR, else ~/.cache/torchlet, as the
harness's model cache), under extensions/, keyed by torch's version. A missing compiler or a
failed build leaves `available()` False and `linear` dequantizing for F.linear: slower, same
numbers; the caller decides whether to say so. The layers' ops have no fallback here: the model
runs v17's PyTorch layers where `takes` is False.

    python -m implementations.v18_quantized_weights.cpu_kernels    # build it (setup.sh)"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from torchlet.contract import QuantizedTensor

SOURCES = [Path(__file__).resolve().parent / "csrc" / name
           for name in ("qlinear.cpp", "layers.cpp", "attention.cpp")]
# -ffp-contract=off: the kernel rounds each weight as QuantizedTensor.dequantize does (a product,
# then a sum); fusing them into one FMA would change the weights' last bits. -fopenmp: at::parallel_for
# is OpenMP pragmas in torch's headers, so without it the ops ran on one thread whatever torch's
# count (2 threads were no faster than 1 on a product).
FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp"]

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
        cpp_extension.load(name="torchlet_qlinear", sources=[str(s) for s in SOURCES],
                           extra_cflags=FLAGS, extra_ldflags=["-fopenmp"],
                           build_directory=str(where),
                           is_python_module=False, verbose=verbose)
        _state, build_error = True, None
    except Exception as e:  # no compiler, a failed build, an unwritable cache: fall back
        last = (str(e).strip().splitlines() or [""])[-1]
        _state, build_error = False, f"{type(e).__name__}: {last}"
    build_seconds = time.perf_counter() - start
    return _state


def registered() -> bool:
    """Whether the ops are in this process: a library registers its namespace once."""
    try:
        torch.ops.torchlet_q.linear, torch.ops.torchlet_q.paged_decode_attention
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



def takes(device, dtype: torch.dtype) -> bool:
    """Whether a model on this device and dtype runs the layers' ops: float32 on a CPU, with the
    extension built."""
    return torch.device(device).type == "cpu" and dtype == torch.float32 and available()


# The layers' ops (csrc/layers.cpp, csrc/attention.cpp), each the maths of the PyTorch function
# named in its line, called through here so that the ops are looked up once the library is loaded.

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """v00's rms_norm."""
    return torch.ops.torchlet_q.rms_norm(x, weight, eps)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """v09's add_rms_norm: (rms_norm(x + residual), x + residual)."""
    return torch.ops.torchlet_q.add_rms_norm(x, residual, weight, eps)


def rope_split(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, num_heads: int,
               num_kv_heads: int):
    """v01_1's heads on v13's packed row, without Qwen3's q/k norms: q [T, heads, D] and k [T,
    kv_heads, D] turned by v00's rotate with cos and sin [T, D], and v [T, kv_heads, D]."""
    return torch.ops.torchlet_q.rope_split(qkv, cos, sin, num_heads, num_kv_heads)


def store_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    """v08's store_kv."""
    torch.ops.torchlet_q.store_kv(k, v, k_cache, v_cache, slot_mapping)


def paged_decode_attention(q, k_cache, v_cache, block_tables, context_lens,
                           scale: float) -> torch.Tensor:
    """v08's paged_decode_attention."""
    return torch.ops.torchlet_q.paged_decode_attention(q, k_cache, v_cache, block_tables,
                                                       context_lens, scale)


if __name__ == "__main__":
    ok = build()
    print(f"torchlet_q's ops {'ready' if ok else 'unavailable'} in {build_seconds:.1f} s "
          f"(built or loaded from {build_dir()})" + ("" if ok else f": {build_error}"))
