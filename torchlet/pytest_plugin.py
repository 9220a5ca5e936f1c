"""The spec suite's command-line options, loaded by pytest from this package's entry point, and
what a run against a learner's tree reports.

The options live here rather than in the repository's conftest.py because pytest reads an
installed plugin before it parses the command line: `pytest --impl-root DIR -k v00` then takes DIR
as the option's value. Known only to conftest.py, the option is unknown at that first parse, DIR
looks like a test path outside the repository, and pytest never loads the conftest that defines it.
"""
from __future__ import annotations

from collections import Counter

import pytest


def pytest_addoption(parser):
    parser.addoption("--impl-root", default=None,
                     help="run the specs against this tree of versions instead of implementations/")


class StubReports:
    """For a run with --impl-root (conftest.py registers it): a spec that a stub stopped reports
    the stub's one line, not a traceback through the specs, and the run ends by naming the stubs
    hit and pointing at `torchlet check`, which lists every stub left in the order to write them.
    """

    def __init__(self, root: str):
        from torchlet.learner import STUB_MESSAGE

        self.root, self.message = root, STUB_MESSAGE

    def stub(self, exc: BaseException | None) -> bool:
        return isinstance(exc, NotImplementedError) and bool(self.message.match(str(exc)))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.failed and call.excinfo and self.stub(call.excinfo.value):
            report.longrepr = call.excinfo.getrepr(style="value", chain=False)
        return report

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after the short test summary
    def pytest_terminal_summary(self, terminalreporter):
        result = yield
        stats = terminalreporter.stats
        hits = [m for rep in [*stats.get("failed", ()), *stats.get("error", ())]
                if (m := self.message.search(str(rep.longrepr)))]
        if hits:
            stubs = Counter(m.group(2) for m in hits)
            terminalreporter.write_sep("=", "stubs")
            terminalreporter.write_line(f"{len(hits)} failing spec(s) stopped at a stub: " +
                                        ", ".join(f"{name} ({n})" for name, n in stubs.items()))
            for version in sorted({m.group(1) for m in hits}):
                terminalreporter.write_line(
                    f"`torchlet check {self.root} -k {version}` names the function to write "
                    f"next and every stub left, in the order the specs need them")
        return result
