"""A start interrupted (SIGTERM, Ctrl-C) while its migrations wait for a database that does
not answer ends at once (README, Stopping): a paused PgBouncer (``PAUSE``) or a lost host
holds the statement, and the migration's rollback and its connection's close, run as the
cancellation unwound, waited on that same silent connection, so the start ended only when
the pooler resumed, however long that was. The silent connection is dropped instead."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg

from proxy.store.db import create_pool, pooler_kwargs
from proxy.store.migrations import _LOCK_KEY, run_migrations
from proxy.warmup import warm_pool
from tests.integration.pooler.freezer import Freezer, freezer


@contextlib.asynccontextmanager
async def _ended(pool: asyncpg.Pool, warming: asyncio.Task[None]) -> AsyncIterator[None]:
    """The warm-up tests' pool and warm-up, ended however the test ends."""
    try:
        yield
    finally:
        pool.terminate()
        if not warming.done():
            warming.cancel()
            await asyncio.wait({warming}, timeout=1)


async def _ends_at_once(forwarder: Freezer, warming: asyncio.Task[None]) -> None:
    """``warming``, cancelled once its connections fall silent, ends within 3 s, cancelled."""
    forwarder.freeze()
    warming.cancel()
    done, _ = await asyncio.wait({warming}, timeout=3)
    assert done, "the cancelled warm-up waits on connections that never answer"
    assert warming.cancelled()


async def _waiting_on_lock(dsn: str, within: float) -> bool:
    """Whether a statement waits for the migrations' lock within ``within`` s (read outside
    the lock holder's transaction, whose snapshot of pg_stat_activity would not change)."""
    admin = await asyncpg.connect(dsn)
    try:
        return await _waiting(admin, within)
    finally:
        await admin.close()


async def _waiting(admin: asyncpg.Connection, within: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        waiting = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock' AND query LIKE '%pg_advisory_xact_lock%'"
        )
        if waiting:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_migrations_cancelled_on_a_silent_connection_end_at_once(db_dsn: str) -> None:
    admin = await asyncpg.connect(db_dsn)
    try:
        async with freezer(db_dsn) as forwarder:
            # The test holds the migrations' lock, so their first statement waits for it.
            async with admin.transaction():
                await admin.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
                migrating = asyncio.create_task(run_migrations(forwarder.dsn(db_dsn)))
                assert await _waiting_on_lock(db_dsn, 10), migrating
                forwarder.freeze()  # from here the migrations' connection hears nothing
                migrating.cancel()
                done, _ = await asyncio.wait({migrating}, timeout=3)
            assert done, "the cancelled migrations still wait on a connection that never answers"
            assert migrating.cancelled()
    finally:
        # Whatever the migrations' connection still holds on the server goes with it.
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        await admin.close()


async def test_a_warm_up_cancelled_while_acquiring_gives_its_connections_back(
    pooled_dsn: str,
) -> None:
    """The warm-up holds its connections at once; cancelled while some were taken and others
    still awaited (a paused pooler holds the new ones' first statements), those taken never
    went back, and the pool's close at the end of the interrupted start waited for them for
    ever, the pooler resumed or not."""
    pool = await create_pool(pooled_dsn, min_size=1, max_size=2, **pooler_kwargs("transaction"))
    warming = asyncio.create_task(
        warm_pool(pool, 3, timeout=30, warm=lambda conn: asyncio.sleep(0))
    )
    try:
        await asyncio.sleep(0.3)  # two taken, the third waits for one of them
        assert not warming.done()
        warming.cancel()
        await asyncio.wait({warming}, timeout=3)
        assert warming.cancelled()
        closing = asyncio.create_task(pool.close())
        done, _ = await asyncio.wait({closing}, timeout=3)
        assert done, "the pool's close waits for connections the cancelled warm-up kept"
    finally:
        pool.terminate()


async def test_a_warm_up_cancelled_while_warming_on_a_silent_connection_ends_at_once(
    db_dsn: str,
) -> None:
    """Cancelled while its connections run their statements, on connections that hear
    nothing any more (a paused pooler, a lost host), the warm-up ends at once: the warming
    itself waited, each in its transaction's rollback on its silent connection, before the
    warm-up could drop them."""

    async def warm(conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_sleep(30)")

    async with freezer(db_dsn) as forwarder:
        pool = await create_pool(forwarder.dsn(db_dsn), min_size=2, max_size=2)
        warming = asyncio.create_task(warm_pool(pool, 2, timeout=10, warm=warm))
        async with _ended(pool, warming):
            await asyncio.sleep(0.5)  # both in their statement
            assert not warming.done()
            await _ends_at_once(forwarder, warming)


async def test_a_warm_up_cancelled_while_opening_on_silent_connections_ends_at_once(
    db_dsn: str,
) -> None:
    """Cancelled while the pool opens the connections it asked for, whose first statements
    a paused pooler or a lost host holds, the warm-up ends at once: it gathered the
    acquisitions, and a cancelled gather waits for each one, whose connection asyncpg
    closes, on that silent connection, before it gives up."""
    opened = 0

    async def init(conn: asyncpg.Connection) -> None:
        nonlocal opened
        opened += 1
        if opened > 1:  # the pool's own first one opens; the warm-up's wait in this
            await conn.execute("SELECT pg_sleep(30)")

    async with freezer(db_dsn) as forwarder:
        pool = await asyncpg.create_pool(forwarder.dsn(db_dsn), min_size=1, max_size=3, init=init)
        warming = asyncio.create_task(
            warm_pool(pool, 3, timeout=10, warm=lambda conn: asyncio.sleep(0))
        )
        async with _ended(pool, warming):
            await asyncio.sleep(0.5)  # one taken, two opening
            assert not warming.done() and opened == 3
            await _ends_at_once(forwarder, warming)


async def test_a_warm_up_cancelled_twice_while_opening_gives_back_what_it_took(
    db_dsn: str,
) -> None:
    """Cancelled again while it waits for the openings it cancelled (a second signal, the
    lifespan's own cancellation), the warm-up still gives back the connection it had taken:
    kept, the pool's close would wait for it for ever."""
    opened = 0

    async def init(conn: asyncpg.Connection) -> None:
        nonlocal opened
        opened += 1
        if opened > 1:
            await conn.execute("SELECT pg_sleep(30)")

    async with freezer(db_dsn) as forwarder:
        pool = await asyncpg.create_pool(forwarder.dsn(db_dsn), min_size=1, max_size=3, init=init)
        warming = asyncio.create_task(
            warm_pool(pool, 3, timeout=10, warm=lambda conn: asyncio.sleep(0))
        )
        async with _ended(pool, warming):
            await asyncio.sleep(0.5)  # one taken, two opening
            assert not warming.done() and opened == 3
            forwarder.freeze()
            warming.cancel()
            await asyncio.sleep(0.2)  # in the wait for the cancelled openings
            warming.cancel()
            await asyncio.wait({warming}, timeout=3)
            assert warming.done()
            held = [h for h in pool._holders if h._in_use is not None]
            assert not held, "the taken connection was not given back"
