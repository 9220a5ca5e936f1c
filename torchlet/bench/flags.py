"""What the flags every `torchlet bench` subcommand shares resolve to: the versions, device,
dtype and model shape a bench runs, its batch x context cells, the sizes asked of each version,
the GPU's rates. commands.py runs the subcommands with them; mixed.py and tp.py, which
commands.py runs, resolve their own flags with them too."""
from __future__ import annotations

import os
from pathlib import Path

from torchlet.contract import MAX_RUNNING, MAX_STEP_TOKENS, TorchletError


def ints(text: str | None, default) -> list[int]:
    return [int(x) for x in text.split(",")] if text else list(default)


def device_of(args) -> str:
    import torch

    device = getattr(args, "device", None) or ("cuda" if torch.cuda.is_available() else "cpu")
    if not device.startswith("cuda"):
        # must be set before any @triton.jit runs, i.e. before versions are imported
        os.environ.setdefault("TRITON_INTERPRET", "1")
        torch.set_num_threads(getattr(args, "threads", None) or 1)
    elif getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
    return device


def dtype_of(args, device: str):
    import torch

    name = getattr(args, "dtype", "auto")
    if name == "auto":
        name = "bfloat16" if device.startswith("cuda") else "float32"
    return getattr(torch, name)


def shape_of(args, device: str):
    from .workloads import CPU_MODEL, QWEN3_06B, QWEN25_05B, QWEN25_7B, QWEN25_72B

    shape = getattr(args, "model_shape", None) or ("qwen2.5-0.5b" if device.startswith("cuda")
                                                  else "cpu")
    return {"qwen2.5-0.5b": QWEN25_05B, "qwen3-0.6b": QWEN3_06B, "qwen2.5-7b": QWEN25_7B,
            "qwen2.5-72b": QWEN25_72B}.get(shape, CPU_MODEL)


def cells(args, device: str) -> list[tuple[int, int]]:
    """The batch x context cells of --batches and --contexts, or their defaults on `device`."""
    cpu = not device.startswith("cuda")
    return [(b, c) for b in ints(args.batches, (1, 4) if cpu else (1, 8, 64, 256))
            for c in ints(args.contexts, (32, 128) if cpu else (128, 1024, 4096))]


def anchors_on(args, device: str) -> bool:
    """--anchors, or by default on CUDA only: on a CPU the decode bench stays as it was."""
    return device.startswith("cuda") if args.anchors is None else args.anchors


def rates(args) -> tuple[float, float]:
    from .floor import H200_BANDWIDTH, H200_BF16_FLOPS
    return args.bandwidth or H200_BANDWIDTH, args.flops or H200_BF16_FLOPS


def select_versions(args, device: str, need: str | None = None, newest: bool = False,
                    kernels_off: bool = False):
    """Versions named by --versions, or by default every version that can build an engine, has
    `need`, and runs natively on `device` (on a CPU, Triton versions would run in the
    interpreter, which is for specs), or, with kernels_off, runs on its Triton layers' PyTorch
    path there."""
    import implementations
    from .run import load_version

    if args.versions:
        return [load_version(n.strip(), args.impl_root) for n in args.versions.split(",")]
    root = Path(args.impl_root).resolve() if args.impl_root else implementations.REFERENCE_ROOT
    found = [v for v in implementations.discover(root)
             if hasattr(v.package, "build") and (need is None or need in v.capabilities)
             and (device.startswith("cuda") or kernels_off or not v.uses_triton)]
    if not found:
        raise TorchletError(f"no version fits this benchmark on {device}")
    return found[-1:] if newest else found


def wishes_of(args, default_running: int | None) -> dict:
    """The sizes asked for, by contract role: each version gets them as the option it declares
    for that role, if it has one."""
    return {MAX_RUNNING: args.max_running or default_running,
            MAX_STEP_TOKENS: args.max_step_tokens}


def named_of(args) -> dict:
    """--build-opt NAME=INT, for the versions that declare NAME."""
    named = {}
    for item in args.build_opt:
        name, _, value = item.partition("=")
        named[name.strip()] = int(value)
    if getattr(args, "quantize", None):  # v18's weights option (bench decode --quantize)
        named["weights"] = args.quantize
    return named
