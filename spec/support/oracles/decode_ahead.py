"""From v14 a step launches the next step's decode before it returns. A spec that watches what
one step() call runs, and checks it against that step's requests alone, would see the next
step's decode too, fed tokens it cannot know yet: it says `spec(one_step_per_call=True)` and is
skipped for such versions (spec/support/collection/rule.py). What follows is what such a version
computes ahead, for the specs that expect it. v14's page (spec/test_v14_overlap.py) watches
its steps instead."""
from __future__ import annotations

from torchlet.contract import OVERLAP


def overlaps(impl) -> bool:
    return impl is not None and OVERLAP in impl.capabilities


def unread(impl) -> int:
    """Tokens a running request has cached beyond all but its last, between steps: 1 where the
    next decode was launched ahead (v14, on a pool with room), else 0."""
    return int(overlaps(impl))


def ahead(impl, made: int, params) -> bool:
    """Whether the step that made a request's `made`-th token launched its next decode ahead:
    where a version launches ahead (v14, on a pool with room), for every token but a request's
    last allowed one, before the step has read whether that token stops the request."""
    return overlaps(impl) and made < params.max_new_tokens


def wasted(impl, tokens: list[int], params) -> int:
    """Rows a finished request that ended with these tokens had computed for nothing: 1 where a
    decode was launched ahead of a token that then stopped it (a stop or eos token), else 0. The
    row feeds that token at the position after the request's history, a position no pass
    computed before: a new row that is discarded, never a recompute. (An aborted request's row
    is the same, see spec/test_v14_overlap.py.)"""
    return int(ahead(impl, len(tokens), params) and params.stops_at(tokens[-1]) is not None)
