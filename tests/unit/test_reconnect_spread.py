"""The reconnect times told to the streams a new listener ends (``api/reconnect.py``): each
within its bounds, two told one after the other far apart, and a run of them spread over
the whole span, so the clients do not come back in one instant."""

from __future__ import annotations

from proxy.api import reconnect


def test_reconnect_times_stay_within_their_bounds_and_apart() -> None:
    spread = reconnect.Spread(1000, 5000)
    times = [spread() for _ in range(1000)]
    assert all(1000 <= t < 6000 for t in times)
    assert all(abs(a - b) >= 5000 * 0.38 - 1 for a, b in zip(times, times[1:], strict=False))
    tenths = {(t - 1000) // 500 for t in times[:20]}
    assert tenths == set(range(10))  # twenty streams cover every tenth of the span


def test_two_spreads_do_not_start_from_the_same_time() -> None:
    assert len({reconnect.Spread()() for _ in range(20)}) > 1  # two replicas apart


def test_the_ending_frame_says_when_to_reconnect_and_keeps_the_last_event_id() -> None:
    one, two = reconnect.frame(), reconnect.frame()
    assert "id" not in one and "data" not in one
    assert one["retry"] != two["retry"]
