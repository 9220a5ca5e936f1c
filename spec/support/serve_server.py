"""`torchlet serve` in a child process, for the specs: started on a free loopback port, ready
once it prints the line with its address, always stopped.

The child imports the harness that sits beside the versions' tree (--impl-root), when there is
one: a harness mutant (spec/mutants/) is a copy of torchlet/ next to its copy of
implementations/, and the server then runs the mutated copy."""
from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

from torchlet.learner import child_env

ENTRY = "import sys; from torchlet.cli import main; sys.exit(main())"  # the console script's code
READY = re.compile(r"serving on (http://\S+)")


def harness(impl_root: Path) -> tuple[Path | None, dict[str, str]]:
    """The directory to run the child in and its environment: the one holding both the tree
    and a harness, first on the path (`python -c` puts its working directory before
    PYTHONPATH), if there is one."""
    env, beside = child_env(), impl_root.parent
    if not (beside / "torchlet" / "serve").is_dir():
        return None, env
    env["PYTHONPATH"] = os.pathsep.join([str(beside), *filter(None, [env.get("PYTHONPATH")])])
    return beside, env


class Server:
    """One `torchlet serve` child; `url` once started. Its stderr is kept in `log`."""

    def __init__(self, impl_root: Path, version: str, model: Path, *flags: str):
        cwd, env = harness(impl_root)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "serve", "--impl", version, f"--impl-root={impl_root}",
             "--model", str(model), "--port", "0", "--device", "cpu", "--threads", "1",
             *flags], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self._ready()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _ready(self, timeout: float = 120) -> str:
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                self.stop()
                raise RuntimeError(f"torchlet serve printed no address in {timeout} s:\n"
                                   + "".join(self.log)) from None
            if line is None:
                raise RuntimeError(f"torchlet serve exited ({self.proc.wait()}):\n"
                                   + "".join(self.log))
            m = READY.search(line)
            if m:
                return m.group(1)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()
