"""EventBus: persisted events fan out through LISTEN/NOTIFY, whatever their size."""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg
import pytest

from proxy import bus as bus_module
from proxy.app import create_app
from proxy.bus import EventBus
from proxy.cascade.types import EVICTED, USAGE
from proxy.settings import Settings
from proxy.store import events as store
from proxy.store.db import DatabaseUnavailable
from tests.integration.store.helpers import create_session

SENTINEL = "cascade_test_sentinel"  # a channel of the test's own, to order notifications by


async def _bus(pool: asyncpg.Pool, dsn: str) -> EventBus:
    bus = EventBus(pool, dsn)
    await bus.start()
    return bus


async def test_event_too_big_for_notify_arrives_whole(pool: asyncpg.Pool, db_dsn: str) -> None:
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    producer, consumer = await _bus(pool, db_dsn), await _bus(pool, db_dsn)
    try:
        async with consumer.subscribe("t", "s") as queue:
            big = {"blob": "x" * 20_000}
            event_id = await producer.publish(
                pool, tenant="t", session_id="s", name=USAGE, data=big
            )
            got = await asyncio.wait_for(queue.get(), 5)
        assert got.id == event_id
        assert got.name == USAGE
        assert got.data["blob"] == big["blob"]
        assert got.data["session_id"] == "s" and "ts" in got.data
    finally:
        await producer.stop()
        await consumer.stop()


async def test_an_event_after_one_too_big_for_notify_waits_for_it(
    pool: asyncpg.Pool, db_dsn: str
) -> None:
    # The big one is read back from the table; the small one's data came with its NOTIFY
    # and used to overtake it.
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    producer, consumer = await _bus(pool, db_dsn), await _bus(pool, db_dsn)
    try:
        async with consumer.subscribe("t", "s") as queue:
            ids = [
                await producer.publish(pool, tenant="t", session_id="s", name=USAGE, data=data)
                for data in (
                    {"blob": "x" * 20_000},
                    {"small": 1},
                    {"blob": "y" * 20_000},
                    {"small": 2},
                )
            ]
            got = [await asyncio.wait_for(queue.get(), 5) for _ in ids]
        assert [g.id for g in got] == ids
        assert [("blob" in g.data, g.data.get("small")) for g in got] == [
            (True, None),
            (False, 1),
            (True, None),
            (False, 2),
        ]
    finally:
        await producer.stop()
        await consumer.stop()


async def test_transient_event_is_delivered_but_not_stored(pool: asyncpg.Pool, db_dsn: str) -> None:
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    bus = await _bus(pool, db_dsn)
    try:
        async with bus.subscribe("t", "s") as queue:
            assert (
                await bus.publish(pool, tenant="t", session_id="s", name=EVICTED, data={"count": 2})
                is None
            )
            got = await asyncio.wait_for(queue.get(), 5)
        assert (got.name, got.id, got.data["count"]) == (EVICTED, None, 2)
        assert await pool.fetchval("SELECT count(*) FROM events") == 0
    finally:
        await bus.stop()


async def test_other_tenants_subscriber_hears_nothing(pool: asyncpg.Pool, db_dsn: str) -> None:
    await create_session(pool, tenant="a", session_id="s", agent="default", model="m")
    bus = await _bus(pool, db_dsn)
    try:
        async with bus.subscribe("b", "s") as queue:
            await bus.publish(pool, tenant="a", session_id="s", name=USAGE, data={})
            await asyncio.sleep(0.3)
            assert queue.empty()
    finally:
        await bus.stop()


async def _notifications(dsn: str) -> tuple[asyncpg.Connection, list[str]]:
    got: list[str] = []
    conn = await asyncpg.connect(dsn)
    await conn.add_listener(store.NOTIFY_CHANNEL, lambda *args: got.append(args[-1]))
    await conn.add_listener(SENTINEL, lambda *args: got.append(SENTINEL))
    return conn, got


async def _announced(pool: asyncpg.Pool, got: list[str], tenant: str = "t") -> bool:
    """Insert one event on (tenant, s) and say whether a NOTIFY went out for it. PostgreSQL
    delivers notifications in the order their transactions committed, so once a sentinel
    sent after the insert arrives, any the insert made is in: no fixed wait to guess."""
    got.clear()
    await store.insert_event(pool, tenant=tenant, session_id="s", name=USAGE, data={})
    await pool.execute("SELECT pg_notify($1, '')", SENTINEL)
    deadline = time.monotonic() + 10
    while SENTINEL not in got:
        assert time.monotonic() < deadline, "the sentinel notification never arrived"
        await asyncio.sleep(0.01)
    return got.index(SENTINEL) == 1


async def test_events_are_announced_only_while_a_replica_watches(
    pool: asyncpg.Pool, db_dsn: str
) -> None:
    """No stream open on a session: its events are stored but cost no NOTIFY."""
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    listener, got = await _notifications(db_dsn)
    bus = await _bus(pool, db_dsn)
    try:
        assert not await _announced(pool, got)
        async with bus.subscribe("t", "s") as queue:
            assert await _announced(pool, got)
            assert (await asyncio.wait_for(queue.get(), 5)).name == USAGE
            # another tenant's session of the same name is not watched
            await create_session(pool, tenant="u", session_id="s", agent="d", model="m")
            assert not await _announced(pool, got, tenant="u")
            # a watcher whose replica stopped refreshing expires
            await pool.execute("UPDATE event_watchers SET expires_at = now() - interval '1 s'")
            assert not await _announced(pool, got)
            await bus._watch([("t", "s")])  # what the keeper does every WATCH_TTL / 3
            assert await _announced(pool, got)
        assert await pool.fetchval("SELECT count(*) FROM event_watchers") == 0
        assert not await _announced(pool, got)
        assert await pool.fetchval("SELECT count(*) FROM events") == 6  # all of them stored
    finally:
        await bus.stop()
        await listener.close()


async def test_a_listen_url_that_cannot_connect_refuses_the_start_naming_it(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The pool's database is fine, ``DATABASE_LISTEN_URL`` is not: the start ends with one
    line naming the setting (proxy/refusals.py), not a bare TimeoutError's traceback."""
    monkeypatch.setattr(bus_module, "START_TIMEOUT", 1.5)
    settings = Settings(
        database_url=db_dsn,
        database_listen_url="postgresql://cascade:hunter2@127.0.0.1:1/cascade",
        watch_config=False,
    )
    app = create_app(settings)
    sent: list[dict[str, object]] = []

    async def receive() -> dict[str, str]:
        return {"type": "lifespan.startup"}

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}
    with caplog.at_level(logging.WARNING), pytest.raises(DatabaseUnavailable):
        await app(scope, receive, send)
    assert sent == [{"type": "lifespan.startup.failed", "message": ""}]
    [refusal] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    where = "postgresql://cascade:***@127.0.0.1:1/cascade (DATABASE_LISTEN_URL)"
    assert refusal.startswith(f"cannot start: the event bus cannot LISTEN at {where}")
    assert "hunter2" not in caplog.text
