"""Ranks of a tensor-parallel group for the specs: every rank a child process (never the pytest
process itself, so it never joins a group), over gloo on loopback, always stopped when the spec
ends.

`run_ranks(scenario, *args)` runs `scenario(ranks, counts, *args)` on rank 0, where `ranks` is a
torchlet.parallel.Ranks joined from the environment torchrun would set (the launcher's own
path) and `counts` the list of collectives this rank has called so far; the other ranks follow
rank 0's builds (torchlet.parallel.follow_builds) with the same counter installed, and measure
what each engine they build holds (held_bytes). Returns (rank 0's result, [each other rank's
Follower report]). A scenario raising, or a rank that stops or hangs, fails the spec with its
reason."""
from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import traceback
import types
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

import implementations
from torchlet.parallel import BuildSpec, Ranks, follow_builds, free_port

WAIT_S = 240  # a guard against a hung group, not a measure: the specs take seconds
# The group's own timeout in the specs: a rank that failed mid-collective leaves the other
# waiting this long at most (torchlet's default is for a user's model loads, minutes).
GROUP_TIMEOUT_S = 60
COUNTED = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "broadcast")


def count_collectives() -> list[str]:
    """Wrap torch.distributed's collectives in this process so that each call is appended, by
    name, to the list returned (what the code asks of the group, seen from outside it)."""
    calls: list[str] = []
    for name in COUNTED:
        original = getattr(dist, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)
        counted.__name__ = name
        setattr(dist, name, counted)
    return calls


def held_bytes(root) -> int:
    """Bytes of the distinct storages behind the tensors reachable from root (an engine): each
    storage counted once and whole, however many tensors view it and however little of it they
    view, so a slice kept of a full tensor costs the full tensor. Follows what objects refer to,
    and a function's closure and defaults, never a module, a class, a function's globals or a
    frame: what the engine holds, not what its code could reach."""
    seen, storages, stack = set(), {}, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FrameType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        elif isinstance(obj, types.FunctionType):
            stack.extend((*(obj.__closure__ or ()), *(obj.__defaults__ or ())))
        else:
            stack.extend(gc.get_referents(obj))
    return sum(storages.values())


def measure_builds() -> list[tuple[BuildSpec, int]]:
    """Wrap BuildSpec.engine in this process so that each engine it builds is measured as soon
    as it is built: (the spec, held_bytes of the engine) appended to the list returned."""
    held: list[tuple[BuildSpec, int]] = []
    build = BuildSpec.engine

    def engine(spec, local_rank):
        built = build(spec, local_rank)
        held.append((spec, held_bytes(built)))
        return built
    BuildSpec.engine = engine
    return held


@dataclass
class Follower:
    """What a rank other than 0 reported: the collectives it called, in order, and (spec, bytes
    held) of each engine it built."""

    collectives: list[str] = field(default_factory=list)
    held: list[tuple[BuildSpec, int]] = field(default_factory=list)


def _environment(rank: int, world: int, port: int, parent: tuple[dict, str]) -> None:
    """The parent's environment and directory as they were when the group started (a rank
    forked from the fork server would otherwise have the server's), then the group's."""
    env, cwd = parent
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _rank0(conn, scenario, args, world, port, peers, parent, device="cpu"):
    import torch
    torch.set_num_threads(1)
    _environment(0, world, port, parent)
    os.environ["TORCHLET_SPEC_PEER_PID"] = str(peers[0])  # for a scenario that stops a rank
    try:
        counts = count_collectives()
        with Ranks.from_env(device, timeout_s=GROUP_TIMEOUT_S) as ranks:
            result = scenario(ranks, counts, *args)
        conn.send_bytes(pickle.dumps(("ok", result)))
    except BaseException:  # the spec shows the rank's traceback
        conn.send_bytes(pickle.dumps(("error", traceback.format_exc())))


def _follower(conn, rank, world, port, parent, device="cpu"):
    import torch
    torch.set_num_threads(1)
    _environment(rank, world, port, parent)
    counts, held = count_collectives(), measure_builds()
    try:
        with Ranks.from_env(device, timeout_s=GROUP_TIMEOUT_S) as ranks:
            if ranks.rank != rank:
                raise AssertionError(f"joined as rank {ranks.rank}, not {rank}")
            # what is new each time an engine closes (a scenario may stop this rank)
            sent = [0, 0]

            def report():
                news = Follower(counts[sent[0]:], held[sent[1]:])
                conn.send_bytes(pickle.dumps(("ok", news)))
                sent[:] = len(counts), len(held)
            follow_builds(rank, report)
            report()
    except BaseException:
        conn.send_bytes(pickle.dumps(("error", traceback.format_exc())))


def _context(scenario, device: str):
    """On a CPU, ranks forked from multiprocessing's fork server, which imports torch, this
    module and the scenario's once per pytest process: a spawned rank paid those imports itself,
    about 2 s of CPU a rank and most of a mutant's run here. The server imports and never
    computes, so it holds no threads or torch state to fork; each rank takes the parent's
    environment and directory of the moment, as a spawned one does. CUDA ranks (NCCL) are
    spawned, as the harness's are (torchlet.parallel), with no server in between."""
    if device != "cpu":
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # Read when the server starts. Besides this module and the scenario's: the reference's
    # versions (the newest imports the rest), which a rank building one imported itself, about
    # 1.2 s of CPU a rank; and torch._dynamo, which torch imports at a process's first
    # Tensor.__torch_function__ or broadcast_object_list call (every rank: about 1.5 s). A
    # mutant's copy is a package of another name: its ranks import it, as before.
    newest = f"implementations.{implementations.version_names()[-1]}"
    ctx.set_forkserver_preload([__name__, scenario.__module__, "torch._dynamo", newest])
    return ctx


class Group:
    """The child processes of one run, started and stopped together."""

    def __init__(self, scenario, args, world: int, device: str = "cpu"):
        ctx = _context(scenario, device)
        port, parent = free_port(), (dict(os.environ), os.getcwd())
        self.pipes, self.procs = [None] * world, [None] * world
        for rank in [*range(1, world), 0]:  # rank 0 last: it is told the others' pids
            mine, theirs = ctx.Pipe(duplex=False)
            target, targs = ((_rank0, (theirs, scenario, args, world, port,
                                       [p.pid for p in self.procs[1:]], parent, device))
                             if rank == 0
                             else (_follower, (theirs, rank, world, port, parent, device)))
            proc = ctx.Process(target=target, args=targs, daemon=True)
            proc.start()
            self.pipes[rank], self.procs[rank] = mine, proc

    def result(self, rank: int):
        """Rank 0's result; another rank's reports so far, joined into one Follower (up to the
        last engine it closed)."""
        pipe = self.pipes[rank]
        if rank == 0 and not pipe.poll(WAIT_S):
            raise AssertionError(f"rank 0 gave no result within {WAIT_S} s")
        found = Follower()
        while rank == 0 or pipe.poll(0):
            try:
                # plain pickle: torch would send tensors as shared memory of a process now gone
                status, value = pickle.loads(pipe.recv_bytes())
            except EOFError:
                if rank == 0:
                    raise AssertionError("rank 0 stopped without a result") from None
                break
            if status != "ok":
                raise AssertionError(f"rank {rank} failed:\n{value}")
            if rank == 0:
                return value
            found.collectives += value.collectives
            found.held += value.held
        return found

    def stop(self) -> None:
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def run_ranks(scenario, *args, world: int = 2, device: str = "cpu"):
    """On CUDA ("cuda"), NCCL, one GPU a rank."""
    group = Group(scenario, args, world, device)
    try:
        first = group.result(0)
        return first, [group.result(r) for r in range(1, world)]
    finally:
        group.stop()


def spec_for(impl, model_dir, device="cpu", dtype="float64", **options) -> BuildSpec:
    """The BuildSpec of `impl` (a reference version or a mutant's copy), float64 by default."""
    from pathlib import Path

    root = Path(impl.package.__file__).resolve().parents[1]
    return BuildSpec(impl.name, str(model_dir), device, dtype, options, str(root))
