"""The event bus's listening connection, straight to PostgreSQL beside a pool through
PgBouncer (README, Behind a connection pooler), when that connection goes silent: a firewall
or NAT that forgets it while idle closes nothing, so neither end hears a word, and a
replica that only waited for it to close heard no notification again (its streams lived on
their catch-up reads, its lease waiters on their polls) and logged nothing. The bus asks the
connection to answer now and then; one that does not is dropped, said, and replaced."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest

from proxy import bus as bus_module
from proxy.bus import EventBus
from proxy.store.db import create_pool, pooler_kwargs
from tests.integration.pooler.freezer import freezer, heard
from tests.integration.store.helpers import create_session


@pytest.fixture
async def pooled(pooled_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """The proxy's pool on the test's database, through PgBouncer in transaction mode."""
    pool = await create_pool(pooled_dsn, **pooler_kwargs("transaction"))
    try:
        yield pool
    finally:
        await asyncio.wait_for(pool.close(), 5)


async def test_a_listener_gone_silent_is_replaced_and_said(
    pooled: asyncpg.Pool,
    db_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(bus_module, "PROBE_EVERY", 0.2)
    monkeypatch.setattr(bus_module, "PROBE_TIMEOUT", 0.3)
    await create_session(pooled, tenant="t", session_id="s", agent="default", model="m")
    async with freezer(db_dsn) as forwarder:
        bus = EventBus(pooled, forwarder.dsn(db_dsn), "DATABASE_LISTEN_URL")
        await asyncio.wait_for(bus.start(), 10)
        try:
            async with bus.subscribe("t", "s") as queue:
                assert await heard(bus, pooled, queue, 3)
                caplog.set_level(logging.WARNING, logger="cascade.bus")
                forwarder.freeze()
                assert await heard(bus, pooled, queue, 4), "no event after the listener froze"
        finally:
            await asyncio.wait_for(bus.stop(), 5)
    said = [r.getMessage() for r in caplog.records if r.name == "cascade.bus"]
    assert any("did not answer" in m and "DATABASE_LISTEN_URL" in m for m in said), said
    assert any("listening again" in m for m in said), said


async def test_a_listener_closed_under_it_is_said_listening_again(
    pooled: asyncpg.Pool, db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A listening connection the server closed (a terminated backend, a restart) is said
    closed, and its replacement listening again, as a failed reconnection's is: a warning
    that it is reconnecting, and nothing after, read as a bus still deaf."""
    await create_session(pooled, tenant="t", session_id="s", agent="default", model="m")
    bus = EventBus(pooled, db_dsn, "DATABASE_LISTEN_URL")
    await asyncio.wait_for(bus.start(), 10)
    try:
        async with bus.subscribe("t", "s") as queue:
            caplog.set_level(logging.WARNING, logger="cascade.bus")
            ended = await pooled.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            )
            assert ended == 1
            assert await heard(bus, pooled, queue, 4), "no event after the listener closed"
    finally:
        await asyncio.wait_for(bus.stop(), 5)
    said = [r.getMessage() for r in caplog.records if r.name == "cascade.bus"]
    assert any("closed; reconnecting" in m for m in said), said
    assert any("listening again" in m for m in said), said


async def test_a_listener_through_the_pooler_leaves_its_listen_on_one_server(
    pooled: asyncpg.Pool, pooled_dsn: str, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``DATABASE_LISTEN_URL`` the bus LISTENs through the pooler (warned at start):
    a probe that repeated the LISTEN ran it on whichever server the pooler lent, each of which
    then listened for good (a transaction pooler resets nothing), so every notification went
    to each of the pooler's servers, and the bench's count of listeners counted them all."""
    monkeypatch.setattr(bus_module, "PROBE_EVERY", 0.05)
    async with pooled.acquire() as a, pooled.acquire() as b, pooled.acquire() as c:
        await asyncio.gather(*(conn.execute("SELECT pg_sleep(0.1)") for conn in (a, b, c)))
    bus = EventBus(pooled, pooled_dsn, "DATABASE_URL", pooled=True)
    await asyncio.wait_for(bus.start(), 10)
    try:
        await asyncio.sleep(1.0)  # probes, lent server after server
    finally:
        await asyncio.wait_for(bus.stop(), 5)
    admin = await asyncpg.connect(db_dsn)
    try:
        listening = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
        )
    finally:
        await admin.close()
    assert listening <= 1


async def test_a_listener_through_the_pooler_made_again_ends_no_stream(
    pooled: asyncpg.Pool, pooled_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``DATABASE_LISTEN_URL`` the bus's LISTEN hears nothing (its streams live on
    their catch-up reads), so a new listener made after a loss found nothing missed: every
    open stream ended all the same (``RELISTENED``), and its client reconnected for no
    event, every client at once."""
    monkeypatch.setattr(bus_module, "RELISTEN_EVERY", 0.0)
    await create_session(pooled, tenant="t", session_id="s", agent="default", model="m")
    bus = EventBus(pooled, pooled_dsn, "DATABASE_URL", pooled=True)
    await asyncio.wait_for(bus.start(), 10)
    try:
        async with bus.subscribe("t", "s") as queue:
            first = bus._listener
            assert first is not None
            first.terminate()  # lost: the bus makes another
            for _ in range(150):
                if bus.listening and bus._listener is not first:
                    break
                await asyncio.sleep(0.02)
            assert bus.listening and bus._listener is not first
            await asyncio.sleep(0.05)
            assert queue.empty(), queue.get_nowait()
    finally:
        await asyncio.wait_for(bus.stop(), 5)
