"""`python -m spec.mutants list | run NAME... | table`: the mutant set by hand."""
from __future__ import annotations

import argparse
import sys
import time

from . import all_mutants, by_name
from .runner import Worker, run
from .table import write_table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spec.mutants")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="name every mutant, its property and its specs")
    p = sub.add_parser("run", help="run mutants (all when none is named)")
    p.add_argument("names", nargs="*")
    p.add_argument("--log", action="store_true", help="print the child pytest's output")
    sub.add_parser("table", help="run every mutant and rewrite docs/mutants.md")
    args = parser.parse_args(argv)
    if args.command == "list":
        for m in all_mutants():
            print(f"{m.name:36} {m.property:28} -m {m.markexpr:24} {' '.join(m.specs)}")
        return 0
    mutants = [by_name(n) for n in args.names] if getattr(args, "names", None) else all_mutants()
    worker, results = Worker(), []
    try:
        for m in mutants:
            start = time.perf_counter()
            r = run(m, worker)
            results.append(r)
            # the seconds: where the suite's mutant time goes (the slowest are worth a faster
            # killing spec first in their list)
            print(f"{r.status:8} {time.perf_counter() - start:6.1f} s {m.name:36} "
                  f"{r.killer or ''}", flush=True)
            if getattr(args, "log", False) or r.status == "invalid":
                print(r.log)
    finally:
        worker.close()
    if args.command == "table":
        path = write_table(results)
        print(f"wrote {path}")
    return 0 if all(r.killed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
