"""The admission policy: the one question the scheduler asks each step, how many waiting
requests join the running batch. This version's answer is static batching."""
from __future__ import annotations

from collections import deque

from .request import Request


class StaticBatching:
    """Admit every waiting request, but only when the running batch has drained: a request that
    arrives mid-batch waits for the slowest member of that batch."""

    @classmethod
    def assemble(cls, a) -> "StaticBatching":
        return cls()

    def check(self, request: Request) -> None:
        pass  # any request check_request accepts fits

    def admit(self, waiting: deque[Request], running: list[Request]) -> int:
        """How many waiting requests, from the front, join this step."""
        return 0 if running else len(waiting)
