"""Starting the ranks of a tensor-parallel engine, and what every rank other than 0 runs.

A version with the tensor_parallel capability is built on every rank of a torch.distributed
process group; rank 0's engine is the one called, the others follow it (contract:
TensorParallelAPI). This module makes the group and keeps the ranks' engines alike:

- `Ranks(world)` on one machine: rank 0 is this process; it starts the other ranks as child
  processes (multiprocessing's spawn, so no CUDA state is forked) over loopback, and always
  stops them on the way out, even on an error.
- `Ranks.from_env()` under torchrun (one machine or several): every process finds its rank, the
  world and the rendezvous address in the environment torchrun sets (RANK, WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT, LOCAL_RANK); the processes torchrun started on ranks other than 0
  run `follow_builds()`.

Rank 0 builds an engine with `ranks.build(BuildSpec(...))`: the spec goes to every rank, each
loads the checkpoint and builds the same version with the same options, and the others follow
that engine until rank 0 builds the next one or leaves."""
from __future__ import annotations

import contextlib
import datetime
import multiprocessing
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from torchlet.contract import TorchletError
from torchlet.running import kernels_off

# How long a rank waits for the others before its call fails (a rank that died closes its
# connections, which fails the others' calls at once; this bounds a rank that hangs).
TIMEOUT_S = 120


@dataclass(frozen=True)
class BuildSpec:
    """What every rank needs to build the same engine: the version (by name, under root), the
    model, the device kind and dtype, the build options, and whether Triton
    kernels run in the interpreter on a CPU."""

    version: str
    model: Any  # a checkpoint directory, or an object whose checkpoint(device, dtype) makes one
    device: str = "cpu"
    dtype: str = "float32"
    options: dict = field(default_factory=dict)
    root: str | None = None
    interpret: bool = False
    threads: int | None = None  # torch's CPU threads on each rank

    def engine(self, local_rank: int):
        """This rank's engine: on a GPU, on the GPU of its local rank."""
        if self.interpret and not self.device.startswith("cuda"):
            os.environ["TRITON_INTERPRET"] = "1"  # before any kernel is defined
        import torch

        import implementations
        from torchlet.checkpoints import load_hf_dir

        root = implementations.REFERENCE_ROOT if self.root is None else self.root
        version = implementations.load(self.version, root)
        device = f"cuda:{local_rank}" if self.device.startswith("cuda") else self.device
        if self.threads is not None:
            torch.set_num_threads(self.threads)
        dtype = getattr(torch, self.dtype)
        checkpoint = (load_hf_dir(self.model) if isinstance(self.model, str)
                      else self.model.checkpoint(device, dtype))
        return version.build(checkpoint, device=device, dtype=dtype, **self.options)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def init_group(rank: int, world: int, address: str, port: int, backend: str,
               timeout_s: float = TIMEOUT_S, local_rank: int | None = None) -> None:
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(rank if local_rank is None else local_rank)
    dist.init_process_group(backend, init_method=f"tcp://{address}:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=timeout_s))


def kernels_mode(spec: BuildSpec):
    return kernels_off(spec.device, spec.interpret)


def follow_builds(local_rank: int = 0, after=None) -> None:
    """A rank other than 0: build each engine rank 0 sends the spec of, and follow it, until
    rank 0 sends None. after(), if given, runs each time rank 0 closes an engine."""
    import torch.distributed as dist

    while True:
        box = [None]
        dist.broadcast_object_list(box, src=0)
        spec = box[0]
        if spec is None:
            return
        with kernels_mode(spec):  # an engine's Triton layers choose when it is built
            engine = spec.engine(local_rank)
            engine.follow()
        del engine
        if after is not None:
            after()


def _rank_main(rank: int, world: int, address: str, port: int, backend: str,
               timeout_s: float, after=None) -> None:
    """A child rank started by Ranks: join, follow, leave; any failure is one line on stderr."""
    import sys

    import torch.distributed as dist

    try:
        init_group(rank, world, address, port, backend, timeout_s)
        follow_builds(rank, after)
    except (TorchletError, RuntimeError) as e:
        print(f"torchlet: rank {rank}: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              file=sys.stderr)
        sys.exit(1)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


class Ranks:
    """The process group, seen from rank 0. A context manager: leaving it closes the engine,
    releases the other ranks and, for those it started, waits for them (then kills any that
    remain). `after`, a module-level function, runs on each rank it starts each time rank 0
    closes an engine (follow_builds): a collective there pairs with rank 0's own call after
    close_engine()."""

    def __init__(self, world: int, device: str = "cpu", timeout_s: float = TIMEOUT_S,
                 *, started: bool = True, after=None):
        if world < 1:
            raise TorchletError(f"--tensor-parallel must be at least 1, got {world}")
        self.world, self.device, self.timeout_s = world, device, timeout_s
        self.children: list[Any] = []
        self.engine = None
        self.start, self.after = started, after

    @classmethod
    def from_env(cls, device: str = "cpu", timeout_s: float = TIMEOUT_S) -> "Ranks":
        """The group torchrun describes in the environment, joined by this process (any rank)."""
        missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
                   if k not in os.environ]
        if missing:
            raise TorchletError(f"not started by torchrun: {', '.join(missing)} not set")
        ranks = cls(int(os.environ["WORLD_SIZE"]), device, timeout_s, started=False)
        ranks.rank = int(os.environ["RANK"])
        ranks.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        return ranks

    def __enter__(self) -> "Ranks":
        import torch.distributed as dist

        backend = backend_for(self.device)
        if not self.start:  # torchrun's
            init_group(self.rank, self.world, os.environ["MASTER_ADDR"],
                       int(os.environ["MASTER_PORT"]), backend, self.timeout_s, self.local_rank)
            return self
        self.rank, self.local_rank = 0, 0
        if self.world == 1:
            return self
        address, port = "127.0.0.1", free_port()
        spawn = multiprocessing.get_context("spawn")
        try:
            for rank in range(1, self.world):
                child = spawn.Process(target=_rank_main, daemon=True, args=(
                    rank, self.world, address, port, backend, self.timeout_s, self.after))
                child.start()
                self.children.append(child)
            init_group(0, self.world, address, port, backend, self.timeout_s)
        except BaseException:
            self._stop_children()
            if dist.is_initialized():
                dist.destroy_process_group()
            raise
        return self

    def build(self, spec: BuildSpec):
        """Rank 0: the engine spec describes, built on every rank (the previous one closed)."""
        import torch.distributed as dist

        self.close_engine()
        if self.world > 1:
            try:
                dist.broadcast_object_list([spec], src=0)
            except RuntimeError as e:
                raise TorchletError(f"tensor parallel: a rank stopped before the build ({e})") from None
        self.engine = spec.engine(self.local_rank)
        return self.engine

    def close_engine(self) -> None:
        engine, self.engine = self.engine, None
        if engine is not None and self.world > 1:
            engine.close()

    def __exit__(self, kind, error, trace) -> None:
        """Release the other ranks. After an error the group may be mid-collective, where a
        goodbye would wait for the timeout: then this rank just leaves (the others' next call
        fails as the connections close) and the ranks it started are killed."""
        import torch.distributed as dist

        try:
            if kind is None and self.world > 1 and dist.is_initialized() and self.rank == 0:
                with contextlib.suppress(TorchletError, RuntimeError):
                    self.close_engine()
                    dist.broadcast_object_list([None], src=0)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
            self._stop_children(wait=kind is None)

    def _stop_children(self, wait: bool = False) -> None:
        for child in self.children:
            child.join(timeout=10 if wait else 0)
        for child in self.children:
            if child.is_alive():
                child.kill()
                child.join()
        self.children = []
