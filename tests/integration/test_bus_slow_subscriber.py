"""A subscriber that reads nothing (a stalled console, a client that stopped reading its
stream) holds at most ``MAX_QUEUED`` events: past that it is dropped, its queue emptied
down to ``LAGGED``, and its stream ends, so the client reconnects with Last-Event-ID and
replays what is persisted. Other subscribers of the session are not touched."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from proxy import bus as bus_module
from proxy.bus import BusEvent, EventBus
from proxy.cascade.types import USAGE
from tests.integration.store.helpers import create_session

BOUND = 3


async def test_a_subscriber_that_reads_nothing_is_dropped_at_the_bound(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_module, "MAX_QUEUED", BOUND, raising=False)
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    bus = EventBus(pool, db_dsn)
    await bus.start()
    try:
        async with bus.subscribe("t", "s") as stalled, bus.subscribe("t", "s") as reader:
            got: list[BusEvent] = []
            for i in range(1, 4 * BOUND + 1):
                bus._deliver(("t", "s"), BusEvent(USAGE, {"n": i}, i))
                got.append(reader.get_nowait())  # a subscriber that keeps up loses nothing
            bus.broadcast_local("config.reloaded", {})  # the replica-wide path is bounded too
            assert stalled.qsize() == 1
            assert stalled.get_nowait() is getattr(bus_module, "LAGGED", None)
            assert [e.id for e in got] == list(range(1, 4 * BOUND + 1))
            assert reader.get_nowait().name == "config.reloaded"
            assert bus.watched(("t", "s"))  # the reader still watches
            bus._deliver(("t", "s"), BusEvent(USAGE, {}, 99))
            assert stalled.empty() and reader.get_nowait().id == 99
    finally:
        await bus.stop()


async def test_the_last_subscriber_dropped_stops_watching(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_module, "MAX_QUEUED", BOUND, raising=False)
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    bus = EventBus(pool, db_dsn)
    await bus.start()
    try:
        async with bus.subscribe("t", "s") as stalled:
            for i in range(BOUND + 1):
                bus._deliver(("t", "s"), BusEvent(USAGE, {}, i + 1))
            assert not bus.watched(("t", "s"))  # no transient event is made for it
            assert stalled.qsize() == 1
        await asyncio.sleep(0)
        assert not bus.watched(("t", "s"))
    finally:
        await bus.stop()
