"""`torchlet check`'s time limit on each spec, a pytest plugin its child pytest loads with
`-p torchlet.spec_timeout --spec-timeout=SECONDS`.

A learner's function that never returns (a `while` whose condition never changes) would hang the
check with no output. Past the limit, the spec fails naming the function of the learner's tree
that was running, and its line, and the run stops: every later spec that reaches the function
would wait as long. The limit is SIGALRM's: it interrupts Python code between bytecodes, so a
single C call (one torch op) is not cut short, but such a call ends on its own.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path

import pytest


class SpecTimeout(BaseException):
    """Not an Exception, so that neither a learner's `except Exception` nor Hypothesis, which
    retries and shrinks a failing example, catches it and runs the endless code again."""


def pytest_addoption(parser):
    parser.addoption("--spec-timeout", type=float, default=0.0, metavar="SECONDS",
                     help="fail a spec whose setup, call or teardown runs longer (0: no limit)")


def pytest_configure(config):
    seconds = config.getoption("--spec-timeout")
    if seconds > 0 and hasattr(signal, "setitimer"):  # no SIGALRM on Windows: no limit there
        root = config.getoption("--impl-root", default=None)
        config.pluginmanager.register(TimeLimit(seconds, root), "spec-time-limit")


class TimeLimit:
    def __init__(self, seconds: float, root: str | None):
        self.seconds = seconds
        self.root = Path(root).resolve() if root else None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item):
        with self.limit(item):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        with self.limit(item):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item):
        with self.limit(item):
            return (yield)

    @contextlib.contextmanager
    def limit(self, item):
        if threading.current_thread() is not threading.main_thread():  # signals reach only it
            yield
            return

        def expire(signum, frame):
            message = self.message(frame)
            item.session.shouldstop = message
            raise SpecTimeout(message)

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def message(self, frame) -> str:
        """Names the innermost function of the tree on the stack, as a stub names itself
        (`version: module.qualname`); check reads it back with learner.TIMEOUT_MESSAGE."""
        while frame is not None:
            path = Path(frame.f_code.co_filename)
            if self.root and path.is_relative_to(self.root) and len(path.parts) > \
                    len(self.root.parts) + 1:
                version, *module = path.relative_to(self.root).with_suffix("").parts
                code = frame.f_code  # co_qualname from Python 3.11; the bare name before
                name = ".".join([*module, getattr(code, "co_qualname", code.co_name)])
                return (f"{version}: {name} did not return in {self.seconds:g} s (it was at "
                        f"{path}:{frame.f_lineno})")
            frame = frame.f_back
        return f"the spec did not finish in {self.seconds:g} s"
