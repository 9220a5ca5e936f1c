"""A long-lived child that runs pytest again and again in one interpreter, so a mutant costs its
specs and not a fresh torch import and collection setup.

Protocol: one JSON object per line on stdin, {"args": [...], "log": PATH}; for each, one JSON line
{"rc": N} on the protocol stream (the original stdout). pytest's own output goes to PATH.
"""
from __future__ import annotations

import json
import os
import sys


def main() -> int:
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    import pytest  # after the dup: nothing of pytest's reaches the protocol stream

    for line in sys.stdin:
        request = json.loads(line)
        with open(request["log"], "w") as log:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            try:
                # pytest's unraisableexception plugin ends every run with five gc.collect()
                # passes over this interpreter's whole heap (torch, and what earlier runs left):
                # about 1.2 s of CPU a run, most of a mutant's. A run's verdict is its exit
                # code and junit file, which the plugin's warnings never change.
                rc = int(pytest.main([*request["args"], "-p", "no:unraisableexception"]))
            except BaseException as e:  # a crash of one run must not end the worker
                print(f"worker: {type(e).__name__}: {e}", file=sys.stderr)
                rc = 3
            sys.stdout.flush()
            sys.stderr.flush()
        proto.write(json.dumps({"rc": rc}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
