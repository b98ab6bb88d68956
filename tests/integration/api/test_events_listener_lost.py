"""A replica's event listener losing its connection (its backend ended) while the pool
still works: notifications sent until it listens again reach none of its streams, a
transient event's (``session.reset``) for good, so each stream open through the gap ends
once it listens again, and its reconnect replays; ``/readyz`` says whether it listens."""

from __future__ import annotations

import httpx
import pytest

from proxy.api import reconnect
from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.test_events import (
    EventStream,
    Frame,
    chat,
    is_usage,
    open_events,
    user,
)
from tests.integration.api.test_health import sql


def _listener_pid(proxy: ProxyServer) -> int | None:
    listener = proxy.state("bus")._listener
    return None if listener is None or listener.is_closed() else listener.get_server_pid()


def _end_listener(proxy: ProxyServer, dsn: str) -> int:
    pid = _listener_pid(proxy)
    assert pid is not None
    sql(dsn, f"SELECT pg_terminate_backend({pid})")
    return pid


def _retry(frame: Frame) -> int:
    """The frame's ``retry:`` (milliseconds); it carries no event and no id."""
    assert frame.event is None and frame.id is None and frame.data is None, frame.raw
    (value,) = [line.removeprefix("retry: ") for line in frame.raw.splitlines() if "retry" in line]
    return int(value)


def _until_end(events: EventStream) -> list[Frame]:
    frames: list[Frame] = []
    with pytest.raises(AssertionError, match="event stream ended"):
        while True:
            frames.append(events.next())
    return frames


def test_streams_open_while_the_listener_was_lost_end_apart_and_their_reconnects_replay(
    proxy: ProxyServer, db_dsn: str
) -> None:
    """Each stream ends with a ``retry`` of its own (``api/reconnect.py``), so their clients
    do not all come back at once; an ``EventSource``-style reconnect with the last id it
    received (none on the ending frame) then gets every event, those of the gap among them,
    and each once."""
    answer = chat(proxy.origin, "gap", [user("u1")])
    with open_events(proxy.origin, "gap") as one, open_events(proxy.origin, "gap") as two:
        last = one.until(is_usage)[-1].id
        assert two.until(is_usage)[-1].id == last
        lost = _end_listener(proxy, db_dsn)
        chat(proxy.origin, "gap", [user("u1"), answer, user("u2")])  # in the gap, or near it
        assert wait_for(lambda: _listener_pid(proxy) not in (None, lost))
        ends = [_until_end(one), _until_end(two)]
    assert all(frames for frames in ends), "a stream ended without a frame"
    retries = [_retry(frames[-1]) for frames in ends]
    assert all(reconnect.FIRST_MS <= r < reconnect.FIRST_MS + reconnect.SPREAD_MS for r in retries)
    assert retries[0] != retries[1], retries
    for frames in ends:
        got = [int(f.id) for f in frames if f.id is not None]
        resume = str(got[-1]) if got else last  # an EventSource's Last-Event-ID
        with open_events(proxy.origin, "gap", last_event_id=resume) as events:
            got += [int(f.id or 0) for f in events.until(is_usage)]
        assert got == list(range(int(last or 0) + 1, int(last or 0) + 4)), got


def test_readyz_says_whether_the_event_listener_listens(
    proxy: ProxyServer, pg_dsn: str, db_dsn: str
) -> None:
    ready = httpx.get(f"{proxy.origin}/readyz", timeout=5)
    assert ready.json() == {"status": "ok", "database": "ok", "events": "ok"}
    (name,) = sql(db_dsn, "SELECT current_database()")
    sql(pg_dsn, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    try:  # the pool's open connections still answer; the listener cannot come back
        _end_listener(proxy, pg_dsn)
        down = wait_for(
            lambda: (
                (r := httpx.get(f"{proxy.origin}/readyz", timeout=5)).json()["events"] != "ok" and r
            )
        )
        assert down, "readyz never said the listener is gone"
        assert down.status_code == 200  # requests still work: a status, not a 503
        assert down.json() == {"status": "ok", "database": "ok", "events": "reconnecting"}
    finally:
        sql(pg_dsn, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    back = wait_for(lambda: httpx.get(f"{proxy.origin}/readyz", timeout=5).json()["events"] == "ok")
    assert back, "readyz never said the listener is back"
