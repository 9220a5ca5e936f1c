"""One token through one decode step, part by part: `python -m torchlet.docs.walk v16`.

The version is built on the tiny Qwen2 fixture on the CPU (graphs off, so the step's Python runs
and not a replay; the layers on their PyTorch path; outside a process group, so v16 is TP=1), one
request is prefilled and decoded until steady, and one more `step()` is watched with
sys.setprofile. A call is printed when its `self` is one of the engine's parts (the loop, the
parts it holds and the parts they hold, by their names in PART_NAMES; for the request part, an
instance of its class) and its name is a member of that part's Protocol at the version
(torchlet/contract/parts.py: protocol_of): one line per call, indented by how many such calls
it runs inside, naming the part, the member, the Protocol and the file and function of the
tree of versions that ran it. A property a Protocol declares (`request.finished`) is a call too.
docs/parts.md shows the output for v16 (torchlet/docs/parts_doc.py puts it there).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import torch

import implementations
from torchlet.contract import PART_NAMES, GenerationParams, declared, protocol_of
from torchlet.running import triton_interpret

PROMPT = [1, 2, 3, 4, 5]
WARM_STEPS = 3          # the prefill step, then decode steps until the step is steady


@dataclass(frozen=True)
class Call:
    depth: int           # part-level calls it runs inside
    part: str            # "kv"
    member: str          # "grow"
    protocol: str        # "PrefixKVPart"
    where: str           # "v08_paged_gqa_py/kv.py PagedKV.grow"

    def line(self, width: int = 0) -> str:
        call = "  " * self.depth + f"{self.part}.{self.member}"
        return f"{call.ljust(width)}  {self.protocol.ljust(24)}  {self.where}"


def layers_on_pytorch():
    """Engines built inside take their layers' PyTorch path (the Triton interpreter off): a
    step's own Python is what the walk follows."""
    return triton_interpret("0")


def engine_parts(engine) -> dict[str, object]:
    """The parts the loop was assembled from, each reached from the loop, or from a part the
    loop holds, by its name."""
    found, seen = {"loop": engine}, [engine]
    for owner in seen:
        for name in PART_NAMES:
            value = getattr(owner, name, None) if name != "loop" else None
            if value is not None and name not in found and not isinstance(value, type):
                found[name] = value
                seen.append(value)
    return found


def steady_engine(version):
    from torchlet.checkpoints import load_hf_dir
    from torchlet.engines import build_sized
    from torchlet.learner import REPO

    names = {o.name for o in version.options}
    with layers_on_pytorch():
        engine = build_sized(version, load_hf_dir(REPO / "fixtures" / "tiny_qwen2"),
                             dtype=torch.float32, max_model_len=64, max_running=4,
                             **({"use_graphs": False} if "use_graphs" in names else {}))
    engine.add_request(PROMPT, GenerationParams(max_new_tokens=20, ignore_eos=True))
    for _ in range(WARM_STEPS):
        engine.step()
    return engine


def walk(name: str = "v16") -> list[Call]:
    """The part-level calls of one steady decode step of the version, in the order they run."""
    version = implementations.load(name)
    engine = steady_engine(version)
    parts = engine_parts(engine)
    by_id = {id(part): name for name, part in parts.items()}
    request_class = version.recipe.parts.get("request") if version.recipe else None
    root = os.path.realpath(implementations.REFERENCE_ROOT) + os.sep
    calls: list[Call] = []
    stack: list = []

    def profile(frame, event, arg):
        if event == "return":
            if stack and stack[-1] is frame:
                stack.pop()
            return
        if event != "call":
            return
        code = frame.f_code
        if not code.co_varnames or code.co_varnames[0] != "self":
            return
        owner = frame.f_locals.get("self")
        part = by_id.get(id(owner)) or (
            "request" if request_class is not None and isinstance(owner, request_class) else None)
        protocol = protocol_of(part, version.name) if part else None
        if protocol is None or code.co_name not in declared(protocol):
            return
        path = os.path.realpath(code.co_filename)
        where = path[len(root):] if path.startswith(root) else path
        calls.append(Call(len(stack), part, code.co_name, protocol.__name__,
                          f"{where} {code.co_qualname}"))
        stack.append(frame)

    before = sys.getprofile()
    sys.setprofile(profile)
    try:
        engine.step()
    finally:
        sys.setprofile(before)
    return calls


def format_walk(calls: list[Call]) -> str:
    width = max(len("  " * c.depth + f"{c.part}.{c.member}") for c in calls)
    return "\n".join(c.line(width) for c in calls)


def main(argv: list[str]) -> int:
    for name in argv or ["v16"]:
        print(format_walk(walk(name)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
