"""The event bus's listening connection going silent, straight to PostgreSQL through a
forwarder that can freeze it (``tests/integration/pooler/freezer.py``): a new listener silent
before its ``LISTEN`` answers is dropped and replaced, as a probed one is; and the backend of
one dropped for silence, which goes on listening on the server until TCP gives up (holding
back the server's notification queue), is ended once the bus listens again."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from proxy import bus as bus_module
from proxy.bus import EventBus
from tests.integration.pooler.freezer import freezer, heard
from tests.integration.store.helpers import create_session

_LISTENING = (
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
)


async def test_a_listener_silent_before_its_listen_answers_is_replaced(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_module, "PROBE_EVERY", 0.2)
    monkeypatch.setattr(bus_module, "PROBE_TIMEOUT", 0.3)
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    add_listener = asyncpg.Connection.add_listener
    async with freezer(db_dsn) as forwarder:
        opened: list[asyncpg.Connection] = []

        async def frozen_second(self: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
            if self not in opened:
                opened.append(self)
            if len(opened) == 2:  # the first replacement goes silent before its LISTEN
                forwarder.freeze()
            return await add_listener(self, *args, **kwargs)

        monkeypatch.setattr(asyncpg.Connection, "add_listener", frozen_second)
        bus = EventBus(pool, forwarder.dsn(db_dsn), "DATABASE_LISTEN_URL")
        await asyncio.wait_for(bus.start(), 10)
        try:
            async with bus.subscribe("t", "s") as queue:
                assert await heard(bus, pool, queue, 3)
                forwarder.freeze()  # the first listener: its probe times out
                assert await heard(bus, pool, queue, 5), "the bus waits on a silent LISTEN"
                assert len(opened) >= 3
        finally:
            await asyncio.wait_for(bus.stop(), 5)


async def test_the_backend_of_a_listener_dropped_for_silence_is_ended(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_module, "PROBE_EVERY", 0.2)
    monkeypatch.setattr(bus_module, "PROBE_TIMEOUT", 0.3)
    await create_session(pool, tenant="t", session_id="s", agent="default", model="m")
    async with freezer(db_dsn) as forwarder:
        bus = EventBus(pool, forwarder.dsn(db_dsn), "DATABASE_LISTEN_URL")
        await asyncio.wait_for(bus.start(), 10)
        try:
            async with bus.subscribe("t", "s") as queue:
                first = bus._listener
                forwarder.freeze()
                assert await heard(bus, pool, queue, 4), "no event after the listener froze"
                assert bus._listener is not first
                for _ in range(40):
                    if await pool.fetchval(_LISTENING) == 1:
                        break
                    await asyncio.sleep(0.05)
                assert await pool.fetchval(_LISTENING) == 1, "the silent one still listens"
        finally:
            await asyncio.wait_for(bus.stop(), 5)
