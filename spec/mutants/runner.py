"""Runs mutants: a fresh copy of the tree per mutant, its property's specs against the copy in a
reused child interpreter (spec/mutants/worker.py), stopping at the first failure."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from torchlet import learner

from . import Mutant, apply

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Result:
    mutant: Mutant
    status: str          # "killed", "survived" or "invalid" (its specs could not run)
    killer: str | None   # the first spec that failed against it
    ran: int             # specs that ran against it
    log: str             # the tail of the child pytest's output

    @property
    def killed(self) -> bool:
        return self.status == "killed"


class Worker:
    """One child interpreter, reused for every mutant this process runs."""

    def __init__(self, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "spec.mutants.worker"], cwd=REPO, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env={**learner.child_env(), "HYPOTHESIS_PROFILE": "mutants", **(env or {})})

    def pytest(self, args: list[str], log: Path, **harness) -> int:
        """harness: for a harness mutant, the edited package's dir and the modules to import
        anew (spec/mutants/worker.py)."""
        self.proc.stdin.write(json.dumps({"args": args, "log": str(log), **harness}) + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"the mutant worker died; its last output:\n{log.read_text()[-3000:]}")
        return json.loads(reply)["rc"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # every answer is read: only its exit is left,
                self.proc.kill()               # which on a busy machine took over 30 s
                self.proc.wait()


def run(mutant: Mutant, worker: Worker) -> Result:
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        tmp = Path(tmp)
        xml, log = tmp / "junit.xml", tmp / "pytest.log"
        marks = ["-m", mutant.markexpr] if mutant.markexpr else []
        # --tb=native: the verdict is the exit code and the junit file, and a failure's report
        # in pytest's own style parses its spec module's source again for every frame (0.1 s
        # to 0.2 s a kill); Python's traceback still names each frame for a survivor's log.
        # no:benchmark: installed beside xdist, it asks git and hg for the project's name at
        # every run.
        args = [*mutant.specs, *marks, "-x", "-q", "--tb=native",
                "-p", "no:randomly", "-p", "no:xdist", "-p", "no:cacheprovider",
                "-p", "no:benchmark", "--snapshot-warn-unused", f"--junitxml={xml}"]
        if mutant.harness:
            apply(mutant, tmp / "torchlet")
            rc = worker.pytest(args, log, harness=str(tmp), fresh=mutant.fresh)
        elif mutant.reference:  # the copy is imported as `implementations` for the run
            apply(mutant, tmp / "implementations")
            rc = worker.pytest(args, log, harness=str(tmp), fresh=mutant.fresh)
        else:
            root = apply(mutant, tmp / "implementations")
            rc = worker.pytest([*args, f"--impl-root={root}"], log)
        outcomes = learner.read_junit(xml) if xml.exists() else []
        text = log.read_text()[-4000:] if log.exists() else ""
    failed = [o.test for o in outcomes if o.status == "failed"]
    ran = sum(o.status != "skipped" for o in outcomes)
    if rc == 1 and failed:
        return Result(mutant, "killed", failed[0], ran, text)
    if rc == 0 and ran:
        return Result(mutant, "survived", None, ran, text)
    return Result(mutant, "invalid", None, ran, text)  # collection error, nothing selected, ...
