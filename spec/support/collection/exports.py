"""What a version takes unchanged from an earlier one, read from the objects its package
exports: facts the rule (rule.py) reads for `first_with` and `engine_parts`.

A page whose specs exercise one object directly (a block pool, a cache) runs against the first
version that exports that very object; a later version that re-exports it unchanged is skipped,
naming the version they ran against. A version that replaces the object (v12's pool over v08's)
exports another one, and runs them.

A version whose idea is kernels alone (v09, v10: their capability adds Triton kernels and
nothing else) runs v08's very engine, runner, pool and scheduler, and on a CPU its inherited
specs run the layers' PyTorch path, which is v08's (kernel_mode.py). The properties that drive
those engine parts over random schedules would run v08's code again there."""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from spec.support.collection import trees
from torchlet.contract import (LIVE_LANES, QUANTIZED_WEIGHTS, STRUCTURED_OUTPUT, TRITON_BASICS,
                               TRITON_PAGED)

KERNELS_ALONE = (TRITON_BASICS, TRITON_PAGED)  # capabilities whose idea is Triton kernels alone
# capabilities whose idea is how the weights are held alone: on a float checkpoint (every
# fixture) such a version builds its predecessor's very engine, which its own page checks
WEIGHTS_ALONE = (QUANTIZED_WEIGHTS,)
# capabilities whose idea reaches only the requests that ask for it (v19: a grammar): on
# requests without, such a version dispatches its predecessor's ops one for one, which its own
# page checks
ASKED_ALONE = (STRUCTURED_OUTPUT,)
# capabilities whose idea acts only where a lane frees below a held one and a pass could then
# run a smaller bucket (v20: the requests above move down): where no lane moves, such a version
# dispatches its predecessor's ops one for one, which its own page checks
MOVES_ALONE = (LIVE_LANES,)


def tree_of(impl) -> Path:
    return Path(impl.package.__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)  # looked up once a (version, names): collection asks per item
def first_exporter(impl, names: tuple[str, ...]) -> str:
    """The first version of impl's tree that exports these very objects (impl's own name where
    it is the first, or where an earlier version's are other objects)."""
    objects = [getattr(impl.package, n) for n in names]
    for version in trees.versions(tree_of(impl)):
        if all(getattr(version.package, n, None) is o for n, o in zip(names, objects)):
            return version.name
    return impl.name


@functools.lru_cache(maxsize=None)
def engine_source(impl) -> str | None:
    """On a CPU, the version whose engine code impl's runs, where impl adds kernels alone (the
    last version before it that does not); None where impl runs code of its own."""
    if torch.cuda.is_available() or impl.capabilities[-1] not in KERNELS_ALONE:
        return None
    source = None
    for version in trees.versions(tree_of(impl)):
        if version.name == impl.name:
            return source
        if version.capabilities[-1] not in KERNELS_ALONE:
            source = version.name
    return None


@functools.lru_cache(maxsize=None)
def asked_source(impl) -> str | None:
    """The version whose ops impl runs for a request that does not ask for impl's idea, where
    that idea reaches only the requests asking for it (v19: a grammar); None elsewhere."""
    if impl.capabilities[-1] not in ASKED_ALONE:
        return None
    return predecessor(impl)


def moves_source(impl) -> str | None:
    """The version whose ops impl runs where no lane moves, where impl's idea acts only where
    lanes move (v20); None elsewhere."""
    if impl.capabilities[-1] not in MOVES_ALONE:
        return None
    return predecessor(impl)


def predecessor(impl) -> str | None:
    before = None
    for version in trees.versions(tree_of(impl)):
        if version.name == impl.name:
            return before
        before = version.name
    return None


@functools.lru_cache(maxsize=None)
def weights_source(impl) -> str | None:
    """The version whose engine impl builds on a float checkpoint, where impl's idea is how the
    weights are held alone (v18: quantized); None elsewhere."""
    if impl.capabilities[-1] not in WEIGHTS_ALONE:
        return None
    return predecessor(impl)
