"""Meta: parts meet only at their declared seams.

What it checks: every version's engine, built on the tiny fixture, is made of parts that each have
the members of its Protocol (torchlet/contract/parts.py: protocol_of(part, version)), a method
where the Protocol has one, taking the Protocol's parameters by the same names; and no code in
implementations/ uses a member of another part that the part's Protocol leaves out (the rule
below); and v16's engine sends its plan at every loop call that runs a pass (contract COMPUTING).
Why: a part that reaches through another (`runner.model.ops.shard`, `self.kv.pool._tables`) ties
itself to that part's insides, so swapping the part in a later version breaks it silently; a
declared seam says what a swap must keep.
Files: torchlet/contract/parts.py, implementations/.

The rule, read with ast, in every file of implementations/ but the model's own modules (files
named model.py: the decoder, its ops and its memory reach each other through `self.model`, one
part, whose outside is ModelPart's Protocols):
- a root is an expression that names a part: `self.P` or `self._P`; a function parameter named P
  or _P; `a.P` where `a` is an `assemble` method's assembly; a local named P (or _P) assigned
  from a root, alone or in a tuple (`runner, bound = self.runner, key[2]`), in the function or a
  function around it; for the request, a name `request` and the target of a `for` or comprehension over
  something named `requests` (an item of them). P is a part name (PART_NAMES) or `engine`.
- `root.m` must be a member of the Protocol that the part has at the file's version (the last of
  PROTOCOLS[P] not after it). Where the member's annotation is a Protocol (the model's `memory`),
  the chain goes on: `root.m.n` must be that Protocol's. Otherwise the chain ends at m: what m
  is (a tensor, a list of ints) is data, not a part.
- A part with no Protocol at the file's version (v00's model) is not checked.
Tradeoff left visible: the rule checks against the Protocol at the file's version, so an older
file's code that a later version's part reuses is held to the older Protocol; a member that only
the older Protocol declares and the later part lacks is caught when the first spec builds the
later version, by the structural check below, not here.
"""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import implementations
from spec.support.models.fixtures import tiny_checkpoint
from torchlet.contract import (COMPUTING, PART_NAMES, GenerationParams, StepLoopPart, declared,
                               protocol_of)
from torchlet.engines import build_sized

ROOT = Path(implementations.REFERENCE_ROOT)
ROOT_NAMES = set(PART_NAMES) | {"engine"}

# Reaches the rule finds that are left in place, "file:line root.member" -> why. Empty: every
# reach in implementations/ goes through a declared member.
ALLOWED: dict[str, str] = {}


# --- the AST rule ------------------------------------------------------------------------------

def _part_name(name: str) -> str | None:
    bare = name[1:] if name.startswith("_") else name
    return bare if bare in ROOT_NAMES else None


def _iterates_requests(node: ast.expr) -> bool:
    last = node.id if isinstance(node, ast.Name) else node.attr if isinstance(
        node, ast.Attribute) else None
    return last == "requests"


class _Function:
    """The roots one function's names stand for: name -> part."""

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef, assembly: str | None):
        self.names: dict[str, str] = {}
        self.assembly = assembly
        params = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        for arg in params:
            part = _part_name(arg.arg)
            if part is not None:
                self.names[arg.arg] = part
        if "request" not in self.names:
            self.names["request"] = "request"

    def part_of(self, node: ast.expr) -> str | None:
        """The part the expression names, if it is a root."""
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "self" or node.value.id == self.assembly:
                return _part_name(node.attr)
        return None


def _functions(tree: ast.Module):
    """(function node, assembly parameter or None) for every function, nested ones included."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = [a.arg for a in node.args.args]
            assembly = params[1] if node.name == "assemble" and len(params) > 1 else None
            yield node, assembly


def reaches(path: Path, version: str) -> list[str]:
    """'file:line root.member...' for every use of a member the part's Protocol leaves out."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
    found = []
    for function, assembly in _functions(tree):
        scope = _Function(function, assembly)
        body = list(ast.walk(function))
        for node in body:  # locals named after a part, assigned from a root; request items
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
                pairs = (zip(target.elts, value.elts) if isinstance(target, ast.Tuple)
                         and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts)
                         else [(target, value)])
                for name, value in pairs:  # `runner, bound = self.runner, key[2]` too
                    if isinstance(name, ast.Name) and _part_name(name.id):
                        part = scope.part_of(value)
                        if part is not None:
                            scope.names[name.id] = part
            targets = ([(node.target, node.iter)] if isinstance(node, (ast.For, ast.comprehension))
                       else [(g.target, g.iter) for g in node.generators]
                       if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp,
                                            ast.DictComp)) else [])
            for target, iterated in targets:
                if isinstance(target, ast.Name) and _iterates_requests(iterated):
                    scope.names[target.id] = "request"
        for node in body:
            if not isinstance(node, ast.Attribute):
                continue
            part = scope.part_of(node.value)
            if part is None:
                continue
            protocol = protocol_of("loop" if part == "engine" else part, version)
            if protocol is None:
                continue
            chain, members, here = [node.attr], declared(protocol), node
            while True:
                member = members.get(here.attr)
                if member is None:
                    found.append(f"{rel}:{node.lineno} {part}.{'.'.join(chain)}")
                    break
                parent = next((p for p in body if isinstance(p, ast.Attribute)
                               and p.value is here), None)
                if parent is None or not (isinstance(member, type)
                                          and getattr(member, "_is_protocol", False)):
                    break
                chain.append(parent.attr)
                members, here = declared(member), parent
    return found


def all_reaches() -> list[str]:
    found = []
    for version in implementations.version_names():
        for path in sorted((ROOT / version).rglob("*.py")):
            if path.name != "model.py":
                found += reaches(path, version)
    return found


def test_no_part_reaches_a_member_its_protocol_leaves_out():
    found = [f for f in all_reaches() if f not in ALLOWED]
    assert not found, f"{len(found)} reaches past a part's Protocol:\n  " + "\n  ".join(found)


def test_the_rule_catches_a_reach_through(tmp_path):
    """The rule fails the reaches it is for: a chain through a part's fields, a member of a later
    version's Protocol used in an earlier version's file, and a request item's undeclared field."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "class X:\n"
        "    def f(self, runner, requests):\n"
        "        self.kv.pool._tables\n"
        "        runner.model.ops.shard\n"
        "        runner.model.memory.forward_prefill_cached\n"
        "        self.kv.free_after_decode\n"  # declared: no reach
        "        [r.blocks for r in requests]\n")
    found = sorted(reaches(probe, "v14_overlap"))
    assert [f.split(" ")[1] for f in found] == ["kv.pool", "runner.model", "runner.model",
                                                  "request.blocks"], found
    probe.write_text("class Y:\n    def g(self):\n        self.kv.blocks_for_decode\n")
    assert [f.split(" ")[1] for f in reaches(probe, "v05_decode_lanes")] == [
        "kv.blocks_for_decode"]


# --- each assembled part has its Protocol's members --------------------------------------------

def _params(function) -> list[str] | None:
    """Parameter names after self, or None where it takes *args (any names do)."""
    try:
        sig = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    names = []
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            return names + ["*"]
        if p.kind is not p.VAR_KEYWORD:
            names.append(p.name)
    return names


def lacking(part, protocol) -> list[str]:
    """What the part misses of its Protocol: a member it lacks, a method it has as a value, or a
    method whose leading parameters are not the Protocol's (extra ones must have defaults)."""
    out = []
    for name, member in declared(protocol).items():
        if name == "__contains__" and hasattr(type(part), name) or name != "__contains__" and \
                hasattr(part, name):
            pass
        else:
            out.append(f"{name}: missing")
            continue
        if not inspect.isfunction(member):
            continue
        got = getattr(type(part), name, None) if name == "__contains__" else getattr(part, name)
        if not callable(got):
            out.append(f"{name}: not a method")
            continue
        want, have = _params(member)[1:], _params(got)
        if have is None or want is None:
            continue
        if have and have[0] == "self":
            have = have[1:]
        open_ended = "*" in want  # the Protocol's *args: a version's own further parameters
        if open_ended:
            want = want[:want.index("*")]
        if "*" in have:
            have = have[:have.index("*")]
            want = want[:len(have)]
        if have[:len(want)] != want:
            out.append(f"{name}{tuple(have)}: the Protocol's is {name}{tuple(want)}")
            continue
        extra = list(inspect.signature(got).parameters.values())[len(want) + (
            1 if _params(got) and _params(got)[0] == "self" else 0):]
        required = [p.name for p in extra if p.default is p.empty
                    and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if required and not open_ended:
            out.append(f"{name}: also requires {required}")
    return out


def assembled_parts(version: str) -> dict:
    """The version's engine, built on the tiny fixture, as its parts by name (a request an
    instance of the request class)."""
    loaded = implementations.load(version)
    recipe = loaded.package.PARTS
    options = {o.name for o in recipe.options}
    engine = build_sized(loaded, tiny_checkpoint("tiny_qwen2"), max_model_len=64, max_running=4,
                         **({"use_graphs": False} if "use_graphs" in options else {}))
    found = {"loop": engine}
    seen = [engine]
    # The parts the loop was assembled from: each reachable from the loop by its name.
    for owner in seen:
        for name in PART_NAMES:
            value = getattr(owner, name, None) if name != "loop" else None
            if value is not None and name in recipe.parts and name not in found:
                found[name] = value
                seen.append(value)
    if "request" in found:
        found["request"] = found["request"](0, [1, 2, 3], GenerationParams(max_new_tokens=2))
    if "model" in recipe.parts and "model" not in found:
        found["model"] = recipe.parts["model"]
    return found


@pytest.mark.parametrize("version", implementations.version_names())
def test_every_assembled_part_has_its_protocols_members(version):
    recipe = implementations.load(version).package.PARTS
    parts = assembled_parts(version)
    missing = {}
    for name in recipe.parts:
        protocol = protocol_of(name, version)
        if protocol is None:
            continue
        assert name in parts, f"{version}: its engine holds no {name} part"
        gaps = lacking(parts[name], protocol)
        if gaps:
            missing[f"{name} ({protocol.__name__})"] = gaps
    assert not missing, f"{version}: {missing}"


def test_a_part_lacking_a_member_or_naming_a_parameter_otherwise_fails():
    from torchlet.contract import PolicyPart

    class Short:
        def check(self, request): ...

    class Renamed:
        def check(self, req): ...

        def admit(self, waiting, running): ...

    assert lacking(Short(), PolicyPart) == ["admit: missing"]
    assert lacking(Renamed(), PolicyPart) == ["check('req',): the Protocol's is check('request',)"]


# --- v16 sends its plan at every call that runs a pass -----------------------------------------

def test_v16_sends_its_plan_at_every_loop_call_that_runs_a_pass():
    """Each COMPUTING name is a StepLoopPart method, and v16's engine overrides it with a body that
    records that very name: a pass added to the loop's Protocol and not sent would leave the other
    ranks behind."""
    engine = implementations.load("v16_tensor_parallel").package.PARTS.parts["loop"]
    assert set(COMPUTING) <= set(declared(StepLoopPart))
    unsent = []
    for name in COMPUTING:
        method = vars(engine).get(name)
        tree = ast.parse(inspect.getsource(method).strip()) if method else None
        recorded = tree is not None and any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "record" and n.args and isinstance(n.args[0], ast.Constant)
            and n.args[0].value == name for n in ast.walk(tree))
        if not recorded:
            unsent.append(name)
    assert not unsent, f"v16's engine does not send its plan at {unsent}"
