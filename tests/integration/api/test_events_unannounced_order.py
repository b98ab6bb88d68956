"""An event committed before a later one, but whose announcement the stream's registration
missed (its trigger ran just before the registration committed, as when a client reconnects
in the middle of a turn), still comes before that later one: otherwise a reconnect with the
later one's id, in the moment before the next catch-up, would skip it for good."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import asyncpg
import pytest

from proxy.api import event_cursor, events as events_api
from proxy.bus_payloads import transient_payload
from proxy.settings import Settings
from proxy.store import events as event_store
from proxy.store.db import DatabaseUnavailable
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.test_events import chat, is_usage, open_events, user
from tests.integration.conftest import run_sync

INSERT = (
    "INSERT INTO events (tenant, session_id, name, data) SELECT tenant, id, $2, "
    "jsonb_build_object('session_id', id) FROM sessions WHERE id = $1 RETURNING id"
)


async def _write(dsn: str, sid: str, replica: str) -> tuple[int, int]:
    """Event ``test.unheard`` while the session has no watcher row (no NOTIFY), then, the
    row back, ``test.heard`` (announced): both committed, in that order."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("DELETE FROM event_watchers WHERE session_id = $1 RETURNING *", sid)
        unheard = int(await conn.fetchval(INSERT, sid, "test.unheard"))
        await conn.executemany(
            "INSERT INTO event_watchers (tenant, session_id, replica, expires_at)"
            " VALUES ($1, $2, $3, $4)",
            [tuple(r) for r in rows],
        )
        assert [str(r["replica"]) for r in rows] == [replica]
        heard = int(await conn.fetchval(INSERT, sid, "test.heard"))
        return unheard, heard
    finally:
        await conn.close()


def test_an_unannounced_event_comes_before_a_later_announced_one(
    proxy: ProxyServer, settings: Settings
) -> None:
    assert settings.database_url is not None
    chat(proxy.origin, "unheard", [user("u1")])
    with open_events(proxy.origin, "unheard") as events:
        events.until(is_usage)
        replica = str(proxy.state("bus").replica)
        unheard, heard = run_sync(_write(settings.database_url, "unheard", replica))
        got = events.take(2)
    assert [(f.event, int(f.id or 0)) for f in got] == [
        ("test.unheard", unheard),
        ("test.heard", heard),
    ]


async def _write_burst(dsn: str, sid: str, n: int) -> list[int]:
    """``n`` announced events in one transaction: their notifications come together."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            return [int(await conn.fetchval(INSERT, sid, "test.burst")) for _ in range(n)]
    finally:
        await conn.close()


def test_a_burst_heard_live_in_the_first_seconds_costs_one_read(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the read before the burst's first event finds them all: those behind it are sent
    # already, and a read for each would cost a statement per event per stream
    assert settings.database_url is not None
    monkeypatch.setattr(events_api, "CATCH_UP_SECONDS", 60.0)  # no periodic read between
    reads = []
    fetch = event_store.fetch_session_events_after

    async def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(kwargs["after_id"])
        return await fetch(*args, **kwargs)

    monkeypatch.setattr(event_store, "fetch_session_events_after", counted)
    chat(proxy.origin, "burst", [user("u1")])
    with open_events(proxy.origin, "burst") as events:
        events.until(is_usage)
        before = len(reads)
        ids = run_sync(_write_burst(settings.database_url, "burst", 5))
        got = events.take(5)
    assert [int(f.id or 0) for f in got] == ids
    assert len(reads) - before == 1, reads[before:]


def test_an_outage_during_the_first_read_holds_the_live_event_back(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # sent live without the read, the later event would come first, and a reconnect with
    # its id, before the earlier one came, would skip that one for good
    assert settings.database_url is not None
    monkeypatch.setattr(events_api, "CATCH_UP_SECONDS", 0.5)
    chat(proxy.origin, "outage", [user("u1")])
    fetch, failing = event_store.fetch_session_events_after, []

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        if failing:
            failing.pop()
            raise DatabaseUnavailable("the database is away")
        return await fetch(*args, **kwargs)

    monkeypatch.setattr(event_store, "fetch_session_events_after", flaky)
    with open_events(proxy.origin, "outage") as events:
        events.until(is_usage)
        failing.append(True)  # the next read, the one before the live event, meets an outage
        replica = str(proxy.state("bus").replica)
        unheard, heard = run_sync(_write(settings.database_url, "outage", replica))
        got = events.take(2)
    assert not failing
    assert [(f.event, int(f.id or 0)) for f in got] == [
        ("test.unheard", unheard),
        ("test.heard", heard),
    ]


async def _write_around(dsn: str, sid: str) -> tuple[int, int]:
    """``test.first`` (announced), then a transient ``test.between``, then ``test.after``
    (announced): published in that order, as a reply's deltas fall between its rows."""
    conn = await asyncpg.connect(dsn)
    try:
        tenant = str(await conn.fetchval("SELECT tenant FROM sessions WHERE id = $1", sid))
        first = int(await conn.fetchval(INSERT, sid, "test.first"))
        between = transient_payload(tenant, sid, "test.between", {"session_id": sid, "ts": 0})
        await conn.execute("SELECT pg_notify($1, $2)", event_store.NOTIFY_CHANNEL, between)
        after = int(await conn.fetchval(INSERT, sid, "test.after"))
        return first, after
    finally:
        await conn.close()


def test_the_first_read_sends_no_event_published_after_the_one_heard(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read before a live event finds the events committed since too; sent then, one
    published after a transient event went out before it (a reply's ``context.usage``
    before its last deltas, and the console took them for another client's reply)."""
    assert settings.database_url is not None
    monkeypatch.setattr(events_api, "CATCH_UP_SECONDS", 60.0)  # no periodic read between
    chat(proxy.origin, "around", [user("u1")])
    fetch, written = event_store.fetch_session_events_after, threading.Event()

    async def late(*args: Any, **kwargs: Any) -> Any:  # the read runs once all are written
        await asyncio.to_thread(written.wait, 5)
        return await fetch(*args, **kwargs)

    with open_events(proxy.origin, "around") as events:
        events.until(is_usage)
        monkeypatch.setattr(event_store, "fetch_session_events_after", late)
        ids = run_sync(_write_around(settings.database_url, "around"))
        written.set()
        got = events.take(3)
    assert [(f.event, f.id and int(f.id)) for f in got] == [
        ("test.first", ids[0]),
        ("test.between", None),
        ("test.after", ids[1]),
    ]


async def _write_one_unheard(dsn: str, sid: str, replica: str) -> tuple[int, int]:
    """``test.first`` (announced), then ``test.unheard`` while the session has no watcher
    row (no NOTIFY): the read before the first finds the second, past it."""
    conn = await asyncpg.connect(dsn)
    try:
        first = int(await conn.fetchval(INSERT, sid, "test.first"))
        rows = await conn.fetch("DELETE FROM event_watchers WHERE session_id = $1 RETURNING *", sid)
        unheard = int(await conn.fetchval(INSERT, sid, "test.unheard"))
        await conn.executemany(
            "INSERT INTO event_watchers (tenant, session_id, replica, expires_at)"
            " VALUES ($1, $2, $3, $4)",
            [tuple(r) for r in rows],
        )
        assert [str(r["replica"]) for r in rows] == [replica]
        return first, unheard
    finally:
        await conn.close()


async def _write_heard(dsn: str, sid: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(INSERT, sid, "test.heard"))
    finally:
        await conn.close()


def test_an_event_read_ahead_comes_before_a_later_one_heard_after_the_first_seconds(
    proxy: ProxyServer, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event the first read kept back, its announcement missed, still goes out before
    the next live one when that comes once the first seconds are over: sent after it, a
    reconnect with the later id would skip it for good."""
    assert settings.database_url is not None
    monkeypatch.setattr(events_api, "CATCH_UP_SECONDS", 60.0)  # no periodic read between
    monkeypatch.setattr(event_cursor, "SETTLE_SECONDS", 1.0)
    chat(proxy.origin, "ahead", [user("u1")])
    fetch, written = event_store.fetch_session_events_after, threading.Event()

    async def late(*args: Any, **kwargs: Any) -> Any:  # the read runs once both are written
        await asyncio.to_thread(written.wait, 5)
        return await fetch(*args, **kwargs)

    with open_events(proxy.origin, "ahead") as events:
        opened = time.monotonic()
        events.until(is_usage)
        monkeypatch.setattr(event_store, "fetch_session_events_after", late)
        replica = str(proxy.state("bus").replica)
        first, unheard = run_sync(_write_one_unheard(settings.database_url, "ahead", replica))
        written.set()
        got = events.take(1)
        time.sleep(max(0.0, opened + 1.5 - time.monotonic()))  # the first seconds are over
        heard = run_sync(_write_heard(settings.database_url, "ahead"))
        got += events.take(2)
    assert [(f.event, int(f.id or 0)) for f in got] == [
        ("test.first", first),
        ("test.unheard", unheard),
        ("test.heard", heard),
    ]
