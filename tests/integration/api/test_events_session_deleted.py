"""Regression: an open event stream outlived its session. A console or CLI watching
``GET /v1/sessions/{id}/events`` kept a stream, pinging, on a session that
``DELETE /v1/sessions/{id}`` had removed, forever. The stream now ends (the server closes
it) soon after the delete, on the replica that deleted it or another, and a reconnect gets
the 404 of a missing session."""

from __future__ import annotations

import time

import asyncpg
import httpx
import pytest

from proxy.settings import Settings
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_events import EventStream, chat, is_usage, open_events, user
from tests.integration.conftest import run_sync

HEADERS = {"authorization": "Bearer sk-test-client"}
PROMPT = 1.0
"""How soon after the delete the stream must end: well under the catch-up read's period
(``CATCH_UP_SECONDS``, raised in these tests), so only the bus's word can end it in time."""


def _ends(events: EventStream) -> float:
    """Read the stream to its end; the seconds that took (a frame after the replay fails)."""
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match="event stream ended"):
        frame = events.next()
        raise AssertionError(f"a frame after the delete: {frame.raw}")
    return time.monotonic() - t0


def _delete(origin: str, sid: str) -> None:
    with httpx.Client(base_url=origin, headers=HEADERS, timeout=10) as c:
        assert c.delete(f"/v1/sessions/{sid}").status_code == 200


def _reconnect(origin: str, sid: str) -> int:
    with httpx.Client(base_url=origin, headers=HEADERS, timeout=10) as c:
        return c.get(f"/v1/sessions/{sid}/events").status_code


def test_a_stream_ends_when_its_session_is_deleted(
    proxy: ProxyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("proxy.api.events.CATCH_UP_SECONDS", 30.0)
    chat(proxy.origin, "doomed", [user("u1")])
    chat(proxy.origin, "kept", [user("u1")])
    with open_events(proxy.origin, "doomed") as doomed, open_events(proxy.origin, "kept") as kept:
        doomed.until(is_usage)  # the replay: the subscription is in place
        kept.until(is_usage)
        _delete(proxy.origin, "doomed")
        assert _ends(doomed) < PROMPT
        # another session's stream stays open and live
        answer = {"role": "assistant", "content": "ok"}
        chat(proxy.origin, "kept", [user("u1"), answer, user("u2")])
        assert kept.until(is_usage)[-1].data["session_id"] == "kept"
    assert _reconnect(proxy.origin, "doomed") == 404


def test_a_stream_ends_when_another_replica_deletes_its_session(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("proxy.api.events.CATCH_UP_SECONDS", 30.0)
    other = ProxyServer(settings.model_copy(update={"watch_config": False})).start()
    try:
        chat(proxy.origin, "elsewhere", [user("u1")])
        with open_events(other.origin, "elsewhere") as events:
            events.until(is_usage)
            _delete(proxy.origin, "elsewhere")
            assert _ends(events) < PROMPT
        assert _reconnect(other.origin, "elsewhere") == 404
    finally:
        other.stop()


def test_a_stream_whose_session_vanished_unannounced_ends_at_its_next_read(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete the bus did not hear of (its listener reconnecting; a row deleted by hand)
    still ends the stream: its periodic read of the table finds no session."""
    monkeypatch.setattr("proxy.api.events.CATCH_UP_SECONDS", 0.3)

    async def delete_by_hand() -> None:
        conn = await asyncpg.connect(settings.database_url)
        try:
            await conn.execute("DELETE FROM sessions WHERE id = 'quiet'")
        finally:
            await conn.close()

    chat(proxy.origin, "quiet", [user("u1")])
    with open_events(proxy.origin, "quiet") as events:
        events.until(is_usage)
        run_sync(delete_by_hand())
        assert _ends(events) < 2.0


def test_a_stream_whose_session_was_remade_unannounced_ends_at_its_next_read(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete the bus did not hear of, the id made again at once by a new session with an
    event of its own that no one announced either (no watchers: the listener reconnecting):
    the stream's next read finds a session under its id, but not the one it was opened on,
    and ends there instead of carrying on into the new session's events."""
    monkeypatch.setattr("proxy.api.events.CATCH_UP_SECONDS", 0.3)

    async def remake_by_hand() -> None:  # one transaction: no read can fall between
        conn = await asyncpg.connect(settings.database_url)
        try:
            async with conn.transaction():
                await conn.execute("DELETE FROM event_watchers")
                await conn.execute(
                    "WITH gone AS (DELETE FROM sessions WHERE id = 'reused'"
                    " RETURNING tenant, id, agent)"
                    " INSERT INTO sessions (tenant, id, agent) SELECT tenant, id, agent FROM gone"
                )
                await conn.execute(
                    "INSERT INTO events (tenant, session_id, name, data) SELECT tenant, id,"
                    " 'test.reused', jsonb_build_object('session_id', id) FROM sessions"
                    " WHERE id = 'reused'"
                )
        finally:
            await conn.close()

    chat(proxy.origin, "reused", [user("u1")])
    with open_events(proxy.origin, "reused") as events:
        events.until(is_usage)
        run_sync(remake_by_hand())
        assert _ends(events) < 2.0
