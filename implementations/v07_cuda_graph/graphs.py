"""Capture a function once, replay it many times: CUDA graphs, and a CPU stand-in that obeys the
same contract.

    graph = capture(fn, static_inputs, constants=weights)   # runs fn, records what it did
    static_inputs[0].copy_(new_tokens)                       # update inputs IN PLACE
    out = graph.replay()                                     # same output tensors every time

The contract (a CUDA graph replays kernels on fixed addresses, so the stand-in enforces the same):
- fn reads only its static inputs, the declared `constants` (weights, a KV cache: tensors at
  fixed addresses that nobody replaces), and tensors it creates itself. Reading anything else
  raises GraphCaptureError at capture; replaying with a tensor other than the captured one, or
  after a static input was resized or re-pointed, raises at replay.
- Python values (scalars, shapes, flags) are frozen at capture: replay reuses the values fn saw
  then, whatever the Python variables hold later. Anything that changes per step must be a
  tensor among the static inputs.
- No host sync inside fn: `.item()`, `.tolist()`, `.numpy()`, `bool(t)`, `int(t)`, and ops whose
  output shape depends on data (nonzero, boolean-mask indexing, masked_select, unique, ...)
  raise GraphCaptureError. A graph cannot ask the host a question in the middle of a replay.
- fn must be safe to run more than once on the same inputs: capture runs it (warm-up and capture
  on CUDA, one recording run on CPU) before the first replay. Writing k/v into a cache at given
  positions is safe; incrementing a counter in place is not.
- Random ops draw fresh numbers at every replay (CUDA advances its generator offset per replay;
  the stand-in re-runs the random op), so they are not bit-equal to an eager run.

Backends: CUDA uses torch.cuda.CUDAGraph, warming up on a side stream first and capturing into a
memory pool that the caller may share across graphs. CPU records the aten ops fn dispatches
(TorchDispatchMode sees them after autograd and Python have been peeled away) and replays that
tape over the same static tensors, writing results into the same output tensors. Replay on CPU
is bit-equal to eager: it runs the very same kernels on the same values.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_leaves, tree_unflatten

from torchlet.contract import TorchletError

aten = torch.ops.aten


class GraphCaptureError(TorchletError):
    """fn broke the graph contract: the message names the rule and the fix."""


# ---------------------------------------------------------------------------------------------
# The contract checks, shared by both backends.

_HOST_READS = {"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__",
               "__complex__", "__array__"}


def _host_sync(what: str) -> GraphCaptureError:
    return GraphCaptureError(
        f"host sync inside capture: {what} reads tensor data on the host. A graph replays without "
        f"asking the host anything, so the value read at capture would be frozen forever. Keep the "
        f"computation on the device (argmax, where, masked_fill, index with long tensors) or move "
        f"the read outside the captured function.")


class _NoHostReads(TorchFunctionMode):
    """Tensor methods that copy data to Python (some never reach the dispatcher, e.g. tolist)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in _HOST_READS:
            raise _host_sync(f"Tensor.{name}()")
        return func(*args, **(kwargs or {}))


def _data_dependent(func, args, kwargs) -> str | None:
    """Why this aten call needs the host to see data, or None."""
    if torch.Tag.data_dependent_output in func.tags:
        return f"{func} (what .item() and bool(tensor) call)"
    if func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
        return f"{func} without output_size"
    if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                aten._index_put_impl_.default):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(t is not None and t.dtype in (torch.bool, torch.uint8) for t in indices):
            return f"{func} with a boolean mask (its result has as many rows as True values)"
        return None
    if torch.Tag.dynamic_output_shape in func.tags:
        return f"{func} (its output shape depends on the data)"
    if func is aten._to_copy.default:
        src, device = args[0], kwargs.get("device")
        dst_cpu = device is not None and torch.device(device).type == "cpu"
    elif func is aten.copy_.default:
        src, dst_cpu = args[1], args[0].device.type == "cpu"
    else:
        return None
    if dst_cpu and isinstance(src, torch.Tensor) and src.device.type != "cpu":
        return f"{func} from {src.device} to the host"
    return None


def tensors_in(obj) -> list[torch.Tensor]:
    """Every tensor inside nested mappings, sequences and dataclasses (e.g. a Weights)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in tensors_in(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors_in(v)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) for t in tensors_in(getattr(obj, f.name))]
    return []


def _address(t: torch.Tensor):
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t.device)


class _Pinned:
    """The static inputs and constants of a graph, and where they lived at capture."""

    def __init__(self, static_inputs: tuple[torch.Tensor, ...], constants: list[torch.Tensor]):
        self.static_inputs = static_inputs
        self.external = list(static_inputs) + constants
        self.addresses = [_address(t) for t in self.external]
        # Constants (every weight and cache: about 340 tensors for Qwen2.5-0.5B) are checked at
        # each replay by where their data lives alone: their whole addresses, shapes and
        # strides included, took 0.39 ms a replay on a CPU core, most of a batch-1 step's host
        # time. A constant that moves shows; one resized in place without moving does not.
        self.constant_ptrs = tuple(t.data_ptr() for t in constants)

    def check(self, inputs: tuple) -> None:
        if inputs:
            if len(inputs) != len(self.static_inputs):
                raise GraphCaptureError(
                    f"replay got {len(inputs)} inputs; the graph was captured with "
                    f"{len(self.static_inputs)}")
            for i, (given, captured) in enumerate(zip(inputs, self.static_inputs)):
                if given is not captured:
                    raise GraphCaptureError(
                        f"replay got a different tensor for static input {i} than the one "
                        f"captured: the graph reads the captured tensor's memory, not yours. Copy "
                        f"the new values into graph.static_inputs[{i}] in place and replay.")
        n = len(self.static_inputs)
        moved = [i for i in range(n) if _address(self.external[i]) != self.addresses[i]]
        if not moved and tuple(t.data_ptr() for t in self.external[n:]) != self.constant_ptrs:
            moved = [n + i for i, (t, ptr) in enumerate(zip(self.external[n:], self.constant_ptrs))
                     if t.data_ptr() != ptr]
        if moved:
            i = moved[0]
            t, before = self.external[i], self.addresses[i]
            what = f"static input {i}" if i < n else f"constant {i - n}"
            raise GraphCaptureError(
                f"{what} moved or changed shape since capture ({before[1]} -> "
                f"{tuple(t.shape)}): update it in place with copy_(), never resize or set_()")


# ---------------------------------------------------------------------------------------------
# CPU stand-in: record aten ops once, replay the tape.

@dataclasses.dataclass
class _Op:
    """One recorded aten call. Most ops take each tensor as a positional argument of its own:
    they keep their arguments as called, None where a tensor goes, and `reads` names (argument
    index, slot); a replay fills them in. The others (a tensor inside a list, as cat's, or a
    keyword) keep their flattened arguments (`leaves`, None where a tensor goes, and `spec` to
    rebuild them), and `reads` names (leaf position, slot)."""
    func: Any
    args: tuple | None                # the positional arguments, or None where leaves are kept
    kwargs: dict | None
    reads: list[tuple[int, int]]      # (argument index or leaf position, slot) of each tensor
    writes: list[tuple[int, int]]     # (output leaf position, new slot) of each new tensor
    leaves: list | None = None
    spec: Any = None
    free: list[int] = dataclasses.field(default_factory=list)  # slots last read here


def _plain(args: tuple, kwargs: dict) -> bool:
    """Whether every tensor of an aten call is a positional argument of its own: none in a
    list (cat's, index's) and none a keyword. Such a call is recorded as it was made, without
    flattening its arguments (pytree's flatten and rebuild took a third of a CPU capture)."""
    for a in args:
        if type(a) in (list, tuple) and any(isinstance(x, (torch.Tensor, list, tuple)) for x in a):
            return False
    return not any(isinstance(v, (torch.Tensor, list, tuple)) for v in kwargs.values())


class _Recorder(TorchDispatchMode):
    """Runs fn's aten ops as usual, checking the contract and writing each op down."""

    def __init__(self, external: list[torch.Tensor]):
        super().__init__()
        self.slots: dict[int, int] = {}          # id(tensor) -> slot
        self.alive: list[torch.Tensor] = []      # keeps ids unique while recording
        self.ops: list[_Op] = []
        for t in external:
            self._name(t)
        self.n_external = len(self.alive)
        self.literals: list[torch.Tensor] = []   # torch.tensor(...) values made inside fn

    def _name(self, t: torch.Tensor) -> int:
        if id(t) not in self.slots:
            self.slots[id(t)] = len(self.alive)
            self.alive.append(t)
        return self.slots[id(t)]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = _data_dependent(func, args, kwargs)
        if why:
            raise _host_sync(why)
        if func is aten.lift_fresh.default:
            return self._literal(func, args[0])
        if _plain(args, kwargs):
            reads = [(i, self._read(a, func)) for i, a in enumerate(args)
                     if isinstance(a, torch.Tensor)]
            out = func(*args, **kwargs)
            # Tensors are looked up by slot at replay; the tape keeps only the Python values.
            frozen = tuple(None if isinstance(a, torch.Tensor) else a for a in args)
            self.ops.append(_Op(func, frozen, kwargs, reads, self._writes(out)))
            return out
        leaves, spec = tree_flatten((args, kwargs))
        reads = [(pos, self._read(leaf, func)) for pos, leaf in enumerate(leaves)
                 if isinstance(leaf, torch.Tensor)]
        out = func(*args, **kwargs)
        frozen = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        self.ops.append(_Op(func, None, None, reads, self._writes(out), frozen, spec))
        return out

    def _read(self, t: torch.Tensor, func) -> int:
        """The slot of a tensor fn passes to func: one the graph knows, or an error."""
        slot = self.slots.get(id(t))
        if slot is None:
            raise GraphCaptureError(
                f"fn passed a tensor of shape {tuple(t.shape)} to {func} that is neither a "
                f"static input, nor a declared constant, nor made inside fn. The graph would "
                f"bake in its address; declare it in static_inputs (if you update it between "
                f"replays) or constants (weights, caches).")
        return slot

    def _writes(self, out) -> list[tuple[int, int]]:
        """(output leaf position, new slot) of each tensor func returned that is new: an
        in-place or out= op returns a tensor the graph already knows."""
        leaves = (out,) if isinstance(out, torch.Tensor) else tree_leaves(out)
        return [(pos, self._name(leaf)) for pos, leaf in enumerate(leaves)
                if isinstance(leaf, torch.Tensor) and id(leaf) not in self.slots]

    def _literal(self, func, data: torch.Tensor):
        # torch.tensor(<python data>) inside fn: a value frozen like any Python value, handed out
        # as a fresh copy at each replay so that fn may modify it in place.
        frozen = data.clone()
        self.literals.append(frozen)
        out = func(data)
        self.ops.append(_Op(aten.clone.default, (None,), {}, [(0, self._name(frozen))],
                            [(0, self._name(out))]))
        return out


_capturing = False


def _record(fn, static_inputs, external):
    """Run fn once under the recorder; return the recorder and fn's outputs."""
    global _capturing
    if _capturing:
        raise GraphCaptureError("capture inside a capture: capture the outer function only")
    recorder = _Recorder(external)
    _capturing = True
    try:
        with torch.no_grad(), _NoHostReads(), recorder:
            outputs = fn(*static_inputs)
    finally:
        _capturing = False
    for leaf in tree_leaves(outputs):
        if isinstance(leaf, torch.Tensor) and id(leaf) not in recorder.slots:
            raise GraphCaptureError(
                f"fn returned a tensor of shape {tuple(leaf.shape)} that it did not compute and "
                f"that is not a static input or constant")
    return recorder, outputs


class CpuGraph:
    """The CPU stand-in: a tape of aten ops over the static inputs, constants and outputs."""

    def __init__(self, fn: Callable, static_inputs: Sequence[torch.Tensor], constants=()):
        self.static_inputs = tuple(static_inputs)
        self.pool = None  # memory is eager CPU memory; nothing to share
        self._pinned = _Pinned(self.static_inputs, tensors_in(constants))
        # Replay under the same mode as capture: in-place ops on inference tensors (and copies
        # into the outputs, which are inference tensors if captured so) need inference mode.
        self._inference = torch.is_inference_mode_enabled()
        recorder, self.outputs = _record(fn, self.static_inputs, self._pinned.external)
        self._tape = recorder.ops
        self._external = recorder.alive[:recorder.n_external] + recorder.literals
        self._external_slots = [recorder.slots[id(t)] for t in self._external]
        self._n_slots = len(recorder.alive)
        # Outputs fn computed get their final values copied into the tensors capture returned.
        self._results = [(recorder.slots[id(t)], t) for t in tree_leaves(self.outputs)
                         if isinstance(t, torch.Tensor)
                         and recorder.slots[id(t)] >= recorder.n_external]
        self._plan_frees(keep={slot for slot, _ in self._results} | set(self._external_slots))

    def _plan_frees(self, keep: set[int]) -> None:
        # Drop each intermediate after its last reader so replay holds no more than eager did.
        last = {}
        for i, op in enumerate(self._tape):
            for _, slot in op.reads:
                last[slot] = i
            for _, slot in op.writes:
                last.setdefault(slot, i)
        for slot, i in last.items():
            if slot not in keep:
                self._tape[i].free.append(slot)

    def replay(self, *inputs: torch.Tensor):
        """Re-run the recorded ops over the static inputs (optionally passed again, and then
        checked to be the captured ones); return the same output tensors as capture did."""
        self._pinned.check(inputs)
        env: list = [None] * self._n_slots
        for slot, t in zip(self._external_slots, self._external):
            env[slot] = t
        with torch.no_grad(), torch.inference_mode(self._inference):
            for op in self._tape:
                if op.args is not None:
                    args, kwargs = list(op.args), op.kwargs
                    for i, slot in op.reads:
                        args[i] = env[slot]
                else:
                    leaves = list(op.leaves)
                    for pos, slot in op.reads:
                        leaves[pos] = env[slot]
                    args, kwargs = tree_unflatten(leaves, op.spec)
                out = op.func(*args, **kwargs)
                # A collective (a model sharded over ranks runs them): a CUDA graph orders it on
                # the stream; here its work is waited for.
                if op.func.namespace == "c10d":
                    _wait_for(out)
                if op.writes:
                    out_leaves = (out,) if isinstance(out, torch.Tensor) else tree_leaves(out)
                    for pos, slot in op.writes:
                        env[slot] = out_leaves[pos]
                for slot in op.free:
                    env[slot] = None
            for slot, static_out in self._results:
                if env[slot] is not static_out:
                    static_out.copy_(env[slot])
        return self.outputs


def _wait_for(out) -> None:
    """Wait for the work a collective op returned (torch.distributed's call waits for it, not
    the op the tape replays)."""
    for leaf in tree_leaves(out):
        if hasattr(leaf, "wait") and not isinstance(leaf, torch.Tensor):
            leaf.wait()


# ---------------------------------------------------------------------------------------------
# CUDA: the real thing.

class CudaGraph:
    """torch.cuda.CUDAGraph around fn: warm-up on a side stream, capture, replay."""

    def __init__(self, fn: Callable, static_inputs: Sequence[torch.Tensor], constants=(),
                 pool=None, warmup: int = 3, check: bool = True):
        self.static_inputs = tuple(static_inputs)
        self._pinned = _Pinned(self.static_inputs, tensors_in(constants))
        self.pool = pool
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        # Warm-up lets lazy initialisation (cuBLAS handles, autotuning, allocator growth) happen
        # outside the capture; with check, the first round runs under the recorder to check the
        # contract with the same errors as on CPU, instead of an opaque CUDA capture error.
        with torch.cuda.stream(side), torch.no_grad():
            runs = warmup
            if check:
                _record(fn, self.static_inputs, self._pinned.external)
                runs = max(runs - 1, 0)
            for _ in range(runs):
                fn(*self.static_inputs)
        torch.cuda.current_stream().wait_stream(side)
        self._graph = torch.cuda.CUDAGraph()
        try:
            with torch.no_grad(), torch.cuda.graph(self._graph, pool=pool):
                self.outputs = fn(*self.static_inputs)
        except RuntimeError as e:
            raise GraphCaptureError(f"CUDA graph capture failed: {e}") from e

    def replay(self, *inputs: torch.Tensor):
        self._pinned.check(inputs)
        self._graph.replay()
        return self.outputs


def capture(fn: Callable, static_inputs: Sequence[torch.Tensor], *, constants=(), pool=None,
            warmup: int = 3, check: bool = True):
    """Capture fn(*static_inputs) as a graph on the inputs' device. `constants` holds the other
    tensors fn reads (any nesting of dicts, lists and dataclasses); `pool` (CUDA only) is a
    torch.cuda.graph_pool_handle() to share memory with other graphs. On CUDA, `warmup` runs
    before the capture, the first of them recorded and checked unless check is False (a caller
    that captured the same code before and pays for each run); on CPU the graph is the record."""
    static_inputs = tuple(static_inputs)
    if not static_inputs or not all(isinstance(t, torch.Tensor) for t in static_inputs):
        raise GraphCaptureError("static_inputs must be a non-empty sequence of tensors")
    devices = {t.device for t in static_inputs}
    if len(devices) != 1:
        raise GraphCaptureError(
            f"static inputs live on several devices: {sorted(map(str, devices))}")
    if devices.pop().type == "cuda":
        return CudaGraph(fn, static_inputs, constants, pool=pool, warmup=warmup, check=check)
    return CpuGraph(fn, static_inputs, constants)
