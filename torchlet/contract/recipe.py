"""The contract's recipe machinery: the build options a harness may ask of a version by role
(BuildOption, check_build), the parts an engine is assembled from (PART_NAMES, Recipe, Assembly),
and kernels as torch ops (kernel_op, fake_of). Imported as torchlet.contract."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from .values import BuildError, Checkpoint, TorchletError, _is_int, _kind

# Build options and kernels: what a harness may ask of a version by contract name, so that it
# never guesses option names from a build's signature or imports a module by its file name.

# Roles a build option can play. A harness that sizes an engine to its work asks which option
# has the role; a version has at most one option per role.
MAX_RUNNING = "max_running"             # requests running at once (v04's limit, v05's lanes)
MAX_STEP_TOKENS = "max_step_tokens"     # rows one step may feed
MAX_LEN = "max_len"                     # the longest sequence (prompt + output) it must hold
NUM_BLOCKS = "num_blocks"               # K/V blocks in the pool, the null block included
BLOCK_SIZE = "block_size"               # tokens per K/V block
ROLES = (MAX_RUNNING, MAX_STEP_TOKENS, MAX_LEN, NUM_BLOCKS, BLOCK_SIZE)


@dataclass(frozen=True)
class BuildOption:
    """One keyword build takes besides device and dtype: its name, the type of a value, what
    build does without it (None: derived, as doc says), if the harness may size it, its role,
    and for an int the least value it takes. A build refuses, with TypeError, an option its
    OPTIONS don't name; check_build refuses a declared one's value of another type (bool is not
    an int) or below its minimum, and None unless the default is None."""

    name: str
    type: type
    default: Any
    doc: str
    role: str | None = None
    minimum: int | None = None

    def refusal(self, value: Any) -> str | None:
        """Why value is no value of this option, or None when it is one."""
        if value is None and self.default is None:
            return None
        if self.type is int:
            ok = _is_int(value) and (self.minimum is None or value >= self.minimum)
            expected = "an int" + ("" if self.minimum is None else f" of at least {self.minimum}")
        elif self.type is bool:
            ok, expected = isinstance(value, bool), "True or False"
        else:
            ok, expected = isinstance(value, self.type), f"a {self.type.__name__}"
        if ok:
            return None
        return (f"{self.name} must be {'None or ' if self.default is None else ''}{expected}, "
                f"got {_kind(value)}")


def check_device(device: Any) -> torch.device:
    """The torch device a build is asked for, or a TorchletError saying why there is none here
    (torch itself answers a CUDA device on a machine without one with a bare AssertionError)."""
    try:
        found = torch.device(device)
    except (RuntimeError, TypeError):
        raise TorchletError(f"device={device!r} is not a device torch knows "
                            f"(cpu, cuda, cuda:1, ...)") from None
    if found.type == "cuda":
        if not torch.cuda.is_available():
            raise TorchletError(f"device={device!r}: this machine has no CUDA GPU that torch can "
                                f"use (torch.cuda.is_available() is False); build with "
                                f"device='cpu'")
        if found.index is not None and found.index >= torch.cuda.device_count():
            raise TorchletError(f"device={device!r}: this machine has "
                                f"{torch.cuda.device_count()} CUDA GPU(s), numbered from 0")
    return found


def check_build(version: str, declared: Sequence[BuildOption], options: Mapping[str, Any]
                ) -> None:
    """Refuse what a build of `version` is given before anything is built, each in one line
    naming what it refuses: a device this machine lacks, a dtype that is no floating torch
    dtype, a declared option's value (BuildOption.refusal). An option nobody declares is left
    to the build, whose refusal names the ones it takes."""
    if "device" in options:
        check_device(options["device"])
    dtype = options.get("dtype", torch.float32)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise BuildError(f"{version}: dtype must be a floating torch dtype (torch.float32, "
                         f"torch.bfloat16, ...), got {_kind(dtype)}")
    for option in declared:
        why = option.refusal(options[option.name]) if option.name in options else None
        if why is not None:
            raise BuildError(f"{version}: {why}")


# Kernels a version may declare in KERNELS, by name, with the signature each must have.
# paged_decode_attention(q [B, heads, D], k_cache, v_cache [blocks, block_size, KV heads, D],
#     block_tables [B, max_blocks] int32 (padded with the null block 0), context_lens [B] int32,
#     scale) -> [B, heads, D]: one new token per request over the first context_lens[b] tokens.
PAGED_DECODE_ATTENTION = "paged_decode_attention"



# Recipes: a version's engine as named parts, and the one assembly that builds it.

# The parts an engine is made of, in the order the assembly builds them: a part may use any
# part built before it. A recipe names the parts its version has (v00 only a model and a loop).
PART_NAMES = ("model", "kv", "grammar", "sampler", "proposer", "inputs", "runner", "request",
              "policy", "scheduler", "loop")


class Served:
    """An engine member that one of its parts serves: `lane_of = Served("kv")` on the engine's
    class reads the engine's kv's lane_of at each access (one Served per name). A part names what it serves in its
    `SERVES`; where the engine's part serves no such member (an earlier version's kv) the
    engine has none either (AttributeError, so hasattr and the capability Protocols say so).
    `part` is the attribute path from the engine: "kv", "scheduler", "runner.inputs"."""

    def __init__(self, part: str):
        self.part = part

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, engine: Any, owner: type | None = None) -> Any:
        if engine is None:
            return self
        part = engine
        for name in self.part.split("."):
            part = getattr(part, name)
        if self.name not in getattr(part, "SERVES", ()):
            raise AttributeError(f"{type(engine).__name__!r} object has no attribute "
                                 f"{self.name!r}: its {self.part} does not serve it")
        return getattr(part, self.name)


class Assembly:
    """What the parts of one engine are built from: the checkpoint and its config, the device
    and dtype, the value of every option the recipe's parts declare (given, or the default), and
    each part built so far, as an attribute by its name (`a.kv`, `a.runner`). A part may narrow
    the checkpoint and config that the parts after it see (v16's model: its rank's shard)."""

    def __init__(self, checkpoint: Checkpoint, device: Any, dtype: torch.dtype,
                 options: Mapping[str, Any]):
        self.checkpoint, self.config = checkpoint, checkpoint.config
        self.device, self.dtype = torch.device(device), dtype
        self.options = dict(options)


@dataclass(frozen=True)
class Recipe:
    """A version's engine as data: part name -> part, and the version that wrote each. A part is
    a class or an object; one with an `assemble(assembly)` (a classmethod of a class) is built by
    it, any other is used as it is (a decoder instance, the request class). A part's `OPTIONS`
    are build options of every engine it is in."""

    version: str
    parts: Mapping[str, Any]
    writers: Mapping[str, str]

    @classmethod
    def first(cls, version: str, **parts: Any) -> "Recipe":
        """A recipe whose parts `version` writes all of."""
        return cls(version, _ordered(parts), {name: version for name in parts})

    def replace(self, version: str, **swaps: Any) -> "Recipe":
        """`version`'s recipe: this one's parts, with `swaps` written by `version`."""
        unknown = sorted(set(swaps) - set(PART_NAMES))
        if unknown:
            raise ValueError(f"{version}: no part named {unknown}; parts are {PART_NAMES}")
        writers = {**self.writers, **{name: version for name in swaps}}
        return Recipe(version, _ordered({**self.parts, **swaps}), _ordered(writers))

    def writer(self, name: str) -> str | None:
        """The version that wrote the part (None: the recipe has no such part)."""
        return self.writers.get(name)

    def swapped(self) -> tuple[str, ...]:
        """The parts this recipe's own version wrote."""
        return tuple(n for n, w in self.writers.items() if w == self.version)

    def table(self) -> list[tuple[str, str, str]]:
        """(part, what it is, the version that wrote it), in assembly order."""
        return [(name, _label(part), self.writers[name]) for name, part in self.parts.items()]

    @property
    def options(self) -> tuple[BuildOption, ...]:
        """The options build takes besides device and dtype: each part's OPTIONS, in assembly
        order (a name two parts declare is the first one's)."""
        found: dict[str, BuildOption] = {}
        for part in self.parts.values():
            for option in getattr(part, "OPTIONS", ()):
                found.setdefault(option.name, option)
        return tuple(found.values())

    def build(self, checkpoint: Checkpoint, *, device: Any = "cpu", dtype: torch.dtype = torch.float32,
              **options: Any) -> Any:
        """The engine: every part built in assembly order, the loop last. TypeError naming the
        options build takes when given another."""
        declared = self.options
        names = [o.name for o in declared]
        unknown = sorted(set(options) - set(names))
        if unknown:
            takes = ("no options" if not names else names[0] if len(names) == 1
                     else f"{', '.join(names[:-1])} and {names[-1]}")
            raise TypeError(f"{self.version} takes {takes}, got {unknown}")
        values = {o.name: o.default for o in declared}
        assembly = Assembly(checkpoint, device, dtype, {**values, **options})
        for name, part in self.parts.items():
            assemble = getattr(part, "assemble", None)
            setattr(assembly, name, part if assemble is None else assemble(assembly))
        return assembly.loop


def _ordered(parts: Mapping[str, Any]) -> dict[str, Any]:
    return {name: parts[name] for name in PART_NAMES if name in parts}


def _label(part: Any) -> str:
    """A part as a reader looks it up: a class or function by name, an object by its class, a
    module by its name."""
    if isinstance(part, type) or callable(part) and hasattr(part, "__qualname__"):
        return part.__qualname__
    if hasattr(part, "__spec__") and hasattr(part, "__name__"):
        return part.__name__.rsplit(".", 1)[-1]
    if type(part).__repr__ is not object.__repr__:  # an object that says what it is made of
        return repr(part)
    return f"{type(part).__qualname__} instance"


# --- kernels as ops ------------------------------------------------------------------------
# A version's kernel launcher is a torch op, so that specs (a dispatch mode) and graph recorders
# see one op a launch and not the launch's insides (PITFALLS.md). Registered here, once, rather
# than in the version that first writes a kernel: a learner's stub of it would fail the import.

_LIBRARIES: dict[str, torch.library.Library] = {}  # kept alive: a dropped one unregisters its ops


def kernel_op(qualname: str, mutates_args: tuple[str, ...] = ()):
    """Decorator: the function becomes the torch op `qualname` (its schema read from its type
    hints, as torch.library.custom_op reads it) and the op is returned. A dispatch mode or graph
    recorder sees one op, not the kernel launch inside it. Unlike custom_op, a call reaches the
    function straight from the dispatcher: custom_op's Python layers (dynamo's guard, an aliasing
    check) cost about 50 us a call, and an eager prefill makes about 150 such calls a step."""
    namespace, name = qualname.split("::")
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    lib = _LIBRARIES[namespace]

    def define(fn):
        lib.define(name + torch.library.infer_schema(fn, mutates_args=mutates_args))
        lib.impl(name, fn, "CompositeExplicitAutograd")
        return getattr(getattr(torch.ops, namespace), name).default
    return define


def fake_of(op):
    """Decorator: the op's shapes-only twin, for tracing without running a kernel."""
    def register(fn):
        torch.library.register_fake(op, fn, lib=_LIBRARIES[op.namespace])
        return fn
    return register
