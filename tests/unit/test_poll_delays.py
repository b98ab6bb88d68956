"""The lease waiter's poll delays: bounded, jittered, and drawn without the shared ``random``."""

from __future__ import annotations

import itertools
import random

from proxy.store.leases import POLL_MAX_SECONDS, poll_delays


def test_the_delays_double_up_to_the_cap_each_jittered_down_by_a_quarter_at_most() -> None:
    nominal = [0.01 * 2**i for i in range(12)]
    for want, got in zip(nominal, itertools.islice(poll_delays(), 12), strict=True):
        cap = min(want, POLL_MAX_SECONDS)
        assert cap * 0.75 <= got <= cap


def test_the_delays_leave_the_shared_random_state_alone() -> None:
    """A waiter polls in the server's thread while the application, or a property-based test
    in another thread, draws from ``random``: hypothesis refuses a draw during which the
    shared state moved, as CI saw once."""
    before = random.getstate()
    list(itertools.islice(poll_delays(), 50))
    assert random.getstate() == before
