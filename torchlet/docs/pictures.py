"""Each version's pictures: its scenario (scenarios.py) run on the version, recorded from
outside (record.py) and drawn (draw.py). Versions from the step-wise API on (request_states)
have a step to draw; a version whose package cannot be imported or whose scenario raises (a
learner's tree with stubs left) gets, instead of pictures, the one-line reason."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import implementations
from torchlet.contract import PAGED_KV, PREFIX_CACHE, REQUEST_STATES
from torchlet.docs import draw, scenarios


@dataclass
class Picture:
    version: str
    view: str
    caption: str
    svg: str

    @property
    def file(self) -> str:
        return f"pictures/{self.version}-{self.view}.svg"


def views_of(version, scenario: scenarios.Scenario) -> tuple[str, ...]:
    """The scenario's views; the fallback adds the pool where the version has one."""
    if scenario is scenarios.FALLBACK and PAGED_KV in version.capabilities:
        return scenario.views + ("pool",)
    return scenario.views


def version_pictures(version, checkpoint) -> list[Picture]:
    scenario, run = scenarios.run_scenario(version, checkpoint)
    steps = scenario.pool_steps or tuple(s.number for s in run.steps[::3])
    beside = None
    if scenario.against:  # the same scenario on the version this one is drawn against
        root = Path(version.package.__file__).resolve().parent.parent
        beside = scenarios.run_scenario(implementations.load(scenario.against, root),
                                        checkpoint, scenario)[1]
    return [Picture(version.name, view, scenario.caption,
                    draw.draw(run, view, steps, PREFIX_CACHE in version.capabilities, beside))
            for view in views_of(version, scenario)]


def all_pictures(names: list[str], root: Path) -> dict[str, tuple[list[Picture], str]]:
    """version -> (its pictures, why it has none: "" when it has them or has no steps)."""
    found: dict[str, tuple[list[Picture], str]] = {}
    checkpoint = None
    for name in names:
        try:
            version = implementations.load(name, root)
            if REQUEST_STATES not in version.capabilities:
                found[name] = ([], "")
                continue
            checkpoint = checkpoint or scenarios.checkpoint()
            found[name] = (version_pictures(version, checkpoint), "")
        except Exception as e:  # a learner's stub, a missing Triton: the page says why
            first = (str(e).splitlines() or [""])[0]
            found[name] = ([], f"{type(e).__name__}: {first}")
    return found
