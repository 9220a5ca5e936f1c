"""`torchlet docs build`: the documentation site, generated from the specs.

pages.py reads each version's page contracts and specs (with `ast`) and its recipe (PARTS, by
importing the version's package), compare.py diffs adjacent versions' effective module sets,
site.py writes static HTML. Standard library only, plus the project's own modules."""
from __future__ import annotations

from pathlib import Path

from implementations import REFERENCE_ROOT
from torchlet.learner import DEFAULT_RESULTS, REPO, SPEC_DIR

DEFAULT_OUT = REPO / "docs" / "_site"
DOCS_DIR = REPO / "docs"          # the reader documents the index links (learners.md, ...)
BENCH_DIR = DOCS_DIR / "benchmarks"


def build(out: Path = DEFAULT_OUT, results: Path | None = None, spec_dir: Path = SPEC_DIR,
          root: Path = REFERENCE_ROOT, bench_dir: Path = BENCH_DIR) -> int:
    """Builds the site into `out`; returns the number of pages written."""
    import os

    import torch

    if not torch.cuda.is_available():
        # Kernels are made interpretable when their module is imported, so before any version
        # is; the pictures run the layers' PyTorch path, but for the engines whose kernel
        # launches they watch (torchlet/docs/record.py: kernels_on, at their build).
        os.environ["TRITON_INTERPRET"] = "1"
    from torchlet.docs.pages import version_pages
    from torchlet.docs.pictures import all_pictures
    from torchlet.docs.site import load_benchmarks, load_results, write_site

    pages = version_pages(Path(spec_dir), Path(root))
    drawn = all_pictures([p.name for p in pages], Path(root))
    return write_site(Path(out), pages, load_results(results), load_benchmarks(bench_dir),
                      Path(root), drawn, DOCS_DIR, Path(bench_dir))


def check_out(out: Path) -> None:
    """Refuse an --out under which no directory can be made, before the build: the build takes
    minutes and used to fail only when it wrote, in a traceback."""
    from torchlet.contract import TorchletError

    for where in (out, *out.parents):
        if where.exists():
            if not where.is_dir():
                raise TorchletError(f"--out {out}: {where} is a file, not a directory")
            return


def _cmd_build(args) -> int:
    from torchlet.contract import TorchletError

    check_out(Path(args.out))
    results = Path(args.results) if args.results else None
    if results is not None and not results.is_file():
        raise TorchletError(f"--results {results}: no such file (write one with "
                            "pytest --junitxml=PATH)")
    if results is None and DEFAULT_RESULTS.is_file():
        results = DEFAULT_RESULTS
    n = build(Path(args.out), results)
    print(f"wrote {n} pages to {args.out}" + (f" (spec status from {results})" if results else ""))
    return 0


def add_commands(subparsers) -> None:
    docs = subparsers.add_parser("docs", help="the documentation site")
    sub = docs.add_subparsers(dest="docs_command", metavar="COMMAND", required=True)
    p = sub.add_parser("build", help="write the static site (version map, pages, code compare)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default: docs/_site)")
    p.add_argument("--results", default=None,
                   help="a pytest JUnit XML for pass/fail/skip per spec (default: build/junit.xml "
                        "when it exists)")
    p.set_defaults(run=_cmd_build)
