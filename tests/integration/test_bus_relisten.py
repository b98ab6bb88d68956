"""Which streams the bus ends once it listens again (``RELISTENED``): every one open while
its listener was away, those opened during the gap among them (they too missed what was
notified then), and none opened after it listens again, whose events all reach them."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg
import pytest

from proxy import bus as bus_module
from proxy.bus import RELISTENED, EventBus
from proxy.cascade.types import USAGE
from tests.integration.api.test_health import sql
from tests.integration.store.helpers import create_session

_LISTEN = bus_module.listen
"""The bus's own LISTEN, put back before the bus stops (its listener's end must not be lost
again)."""


async def test_streams_open_through_the_gap_end_and_one_opened_after_does_not(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    bus = EventBus(pool, db_dsn)
    await asyncio.wait_for(bus.start(), 10)
    connect, loop = asyncpg.connect, asyncio.get_running_loop()
    gate, waiting = asyncio.Event(), asyncio.Event()

    async def held_connect(*args: Any, **kwargs: Any) -> asyncpg.Connection:
        # The patch is the asyncpg module's, so every thread's: a connect on another loop
        # (the spare test databases' copies) waited on this loop's gate, which never woke
        # it, and every later test's database waited behind it.
        if asyncio.get_running_loop() is not loop:
            return await connect(*args, **kwargs)
        waiting.set()  # the bus is between listeners
        await gate.wait()
        return await connect(*args, **kwargs)

    monkeypatch.setattr(bus_module.asyncpg, "connect", held_connect)
    try:
        async with bus.subscribe("t", "s") as before:
            assert bus._listener is not None
            bus._listener.terminate()  # lost: the bus reconnects, held at the gate
            await asyncio.wait_for(waiting.wait(), 5)
            assert not bus.listening
            # another thread's connect meanwhile (the spare test databases' copies) goes on
            assert sql(db_dsn, "SELECT 1") == [1]
            async with bus.subscribe("t", "s") as during:
                gate.set()
                for _ in range(100):
                    if bus.listening:
                        break
                    await asyncio.sleep(0.02)
                assert bus.listening
                async with bus.subscribe("t", "s") as after:
                    await bus.publish(pool, tenant="t", session_id="s", name=USAGE, data={})
                    event = await asyncio.wait_for(after.get(), 5)
                    assert event is not RELISTENED and event.name == USAGE
                    await asyncio.sleep(0.2)  # a late end would be here by now
                    assert after.empty()
                for queue in (before, during):
                    assert queue.get_nowait() is RELISTENED
    finally:
        await asyncio.wait_for(bus.stop(), 5)


def _lost_at_once(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Each new listener ended as soon as it listens (a server that ends idle sessions at
    once): the loop times of its LISTENs, appended as they come."""
    listens: list[float] = []

    async def lost_at_once(conn: asyncpg.Connection, *args: Any, **kwargs: Any) -> None:
        await _LISTEN(conn, *args, **kwargs)
        listens.append(asyncio.get_running_loop().time())
        conn.terminate()

    monkeypatch.setattr(bus_module, "listen", lost_at_once)
    return listens


async def test_a_listener_lost_as_soon_as_it_listens_is_not_made_again_at_once(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listener ended right after each LISTEN (a server that ends idle sessions at once)
    is made again at most about once a second, not in a loop as fast as the database
    answers: each time ends every open stream, whose clients all reconnect."""
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    bus = EventBus(pool, db_dsn)
    await asyncio.wait_for(bus.start(), 10)
    listens = _lost_at_once(monkeypatch)
    try:
        async with bus.subscribe("t", "s") as queue:
            assert bus._listener is not None
            bus._listener.terminate()
            await asyncio.sleep(1.5)
            assert 1 <= len(listens) <= 3, f"{len(listens)} LISTENs in 1.5 s"
            assert queue.qsize() == len(listens)  # each one ended the stream
    finally:
        monkeypatch.setattr(bus_module, "listen", _LISTEN)
        await asyncio.wait_for(bus.stop(), 5)


async def test_a_server_ending_idle_sessions_leaves_the_listener_listening(
    pool: asyncpg.Pool, db_dsn: str
) -> None:
    """An ``idle_session_timeout`` shorter than the probes' interval ended the listener, idle
    between them, again and again, and with it every open stream each time."""
    name = await pool.fetchval("SELECT current_database()")
    admin = await asyncpg.connect(db_dsn)
    await admin.execute(f'ALTER DATABASE "{name}" SET idle_session_timeout = 200')  # ms
    bus = EventBus(pool, db_dsn)
    try:
        await asyncio.wait_for(bus.start(), 10)
        first = bus._listener
        await asyncio.sleep(0.8)
        assert first is not None and not first.is_closed() and bus._listener is first
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" RESET idle_session_timeout')
        await admin.close()
        await asyncio.wait_for(bus.stop(), 5)


async def test_a_listener_lost_at_once_over_and_over_is_one_warning_not_two_a_second(
    pool: asyncpg.Pool,
    db_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While each new listener is lost as soon as it listens, the bus says so once, then
    relistens (each time ending the open streams) at DEBUG, not a loss and a return at
    WARNING every second for as long as it lasts (``bus_listen.Losses``, whose return to a
    lasting listener ``tests/unit/test_bus_losses.py`` follows)."""
    bus = EventBus(pool, db_dsn)
    await asyncio.wait_for(bus.start(), 10)
    caplog.set_level(logging.DEBUG, logger="cascade.bus")
    listens = _lost_at_once(monkeypatch)
    try:
        assert bus._listener is not None
        bus._listener.terminate()
        await asyncio.sleep(2.3)
        assert len(listens) >= 2  # each a loss and a return: 5 warnings or more unless quiet
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 3, warnings  # lost, listening again, lost at once
        assert "lost at once" in warnings[-1]
    finally:
        monkeypatch.setattr(bus_module, "listen", _LISTEN)
        await asyncio.wait_for(bus.stop(), 5)
