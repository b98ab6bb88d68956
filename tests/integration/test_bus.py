"""EventBus: persisted events fan out through LISTEN/NOTIFY, whatever their size."""

from __future__ import annotations

import asyncio

import asyncpg

from proxy.bus import EventBus
from proxy.cascade.types import EVICTED, USAGE
from proxy.store import sessions


async def _bus(pool: asyncpg.Pool, dsn: str) -> EventBus:
    bus = EventBus(pool, dsn)
    await bus.start()
    return bus


async def test_event_too_big_for_notify_arrives_whole(pool: asyncpg.Pool, db_dsn: str) -> None:
    await sessions.upsert_session(pool, tenant="t", session_id="s", agent="default", model="m")
    producer, consumer = await _bus(pool, db_dsn), await _bus(pool, db_dsn)
    try:
        async with consumer.subscribe("t", "s") as queue:
            big = {"blob": "x" * 20_000}
            event_id = await producer.publish(pool, tenant="t", session_id="s", name=USAGE,
                                              data=big)
            got = await asyncio.wait_for(queue.get(), 5)
        assert got.id == event_id
        assert got.name == USAGE
        assert got.data["blob"] == big["blob"]
        assert got.data["session_id"] == "s" and "ts" in got.data
    finally:
        await producer.stop()
        await consumer.stop()


async def test_transient_event_is_delivered_but_not_stored(
    pool: asyncpg.Pool, db_dsn: str
) -> None:
    await sessions.upsert_session(pool, tenant="t", session_id="s", agent="default", model="m")
    bus = await _bus(pool, db_dsn)
    try:
        async with bus.subscribe("t", "s") as queue:
            assert await bus.publish(pool, tenant="t", session_id="s", name=EVICTED,
                                     data={"count": 2}) is None
            got = await asyncio.wait_for(queue.get(), 5)
        assert (got.name, got.id, got.data["count"]) == (EVICTED, None, 2)
        assert await pool.fetchval("SELECT count(*) FROM events") == 0
    finally:
        await bus.stop()


async def test_other_tenants_subscriber_hears_nothing(pool: asyncpg.Pool, db_dsn: str) -> None:
    await sessions.upsert_session(pool, tenant="a", session_id="s", agent="default", model="m")
    bus = await _bus(pool, db_dsn)
    try:
        async with bus.subscribe("b", "s") as queue:
            await bus.publish(pool, tenant="a", session_id="s", name=USAGE, data={})
            await asyncio.sleep(0.3)
            assert queue.empty()
    finally:
        await bus.stop()
