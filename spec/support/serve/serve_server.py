"""`torchlet serve` as a user starts it: the console script's code in a child process, on a free
loopback port, ready once it prints the line with its address, always stopped. It costs a
child's imports and model load (about 5 s); spec/support/serve/serve_app.py serves in-process."""
from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading

from torchlet.learner import child_env

ENTRY = "import sys; from torchlet.cli import main; sys.exit(main())"  # the console script's code
READY = re.compile(r"serving on (http://\S+)")


class Server:
    """One `torchlet serve ARGS... --port 0` child; `url` once started. Its stderr is kept in
    `log`."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "serve", *args, "--port", "0"], env=child_env(),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
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
