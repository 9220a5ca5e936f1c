"""From v14 a step launches the next step's decode before it returns. A spec that watches what
one step() call runs, and checks it against that step's requests alone, would see the next
step's decode too, fed tokens it cannot know yet: it is marked `one_step_per_call` and skipped
for such versions. v14's page (spec/test_v14_overlap.py) watches its steps instead."""
from __future__ import annotations

import pytest

from torchlet.contract import OVERLAP
from spec.support.selection import impl_of

REASON = ("from v14 a step() call also launches the next step's decode: this spec watches one "
          "step's own work (see spec/test_v14_overlap.py)")


def overlaps(impl) -> bool:
    return impl is not None and OVERLAP in impl.capabilities


def unread(impl) -> int:
    """Tokens a running request has cached beyond all but its last, between steps: 1 where the
    next decode was launched ahead (v14, on a pool with room), else 0."""
    return int(overlaps(impl))


def before(item) -> None:
    impl = impl_of(item)
    if item.get_closest_marker("one_step_per_call") and overlaps(impl):
        pytest.skip(REASON)
