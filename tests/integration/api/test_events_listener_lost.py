"""A replica's event listener losing its connection (its backend ended) while the pool
still works: notifications sent until it listens again reach none of its streams, a
transient event's (``session.reset``) for good, so each stream open through the gap ends
once it listens again, and its reconnect replays; ``/readyz`` says whether it listens."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.api.conftest import ProxyServer, wait_for
from tests.integration.api.test_events import chat, is_usage, open_events, user
from tests.integration.api.test_health import sql


def _listener_pid(proxy: ProxyServer) -> int | None:
    listener = proxy.state("bus")._listener
    return None if listener is None or listener.is_closed() else listener.get_server_pid()


def _end_listener(proxy: ProxyServer, dsn: str) -> int:
    pid = _listener_pid(proxy)
    assert pid is not None
    sql(dsn, f"SELECT pg_terminate_backend({pid})")
    return pid


def test_a_stream_open_while_the_listener_was_lost_ends_and_its_reconnect_replays(
    proxy: ProxyServer, db_dsn: str
) -> None:
    answer = chat(proxy.origin, "gap", [user("u1")])
    with open_events(proxy.origin, "gap") as events:
        last = events.until(is_usage)[-1].id
        lost = _end_listener(proxy, db_dsn)
        assert wait_for(lambda: _listener_pid(proxy) not in (None, lost), 5)
        with pytest.raises(AssertionError, match="event stream ended"):
            frame = events.next()
            raise AssertionError(f"a frame after the listener came back: {frame.raw}")
    chat(proxy.origin, "gap", [user("u1"), answer, user("u2")])
    with open_events(proxy.origin, "gap", last_event_id=last) as events:
        again = events.until(is_usage)
    assert [int(f.id or 0) for f in again] == list(range(int(last or 0) + 1, int(last or 0) + 4))


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
            ),
            5,
        )
        assert down, "readyz never said the listener is gone"
        assert down.status_code == 200  # requests still work: a status, not a 503
        assert down.json() == {"status": "ok", "database": "ok", "events": "reconnecting"}
    finally:
        sql(pg_dsn, f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    back = wait_for(
        lambda: httpx.get(f"{proxy.origin}/readyz", timeout=5).json()["events"] == "ok", 5
    )
    assert back, "readyz never said the listener is back"
