"""A statement the pool's bound cancels (``CASCADE_DB_STATEMENT_TIMEOUT_SECONDS``, asyncpg's
``command_timeout``) in the middle of a transaction, directly and through PgBouncer in
transaction mode: the server stops running it (asyncpg's cancel request reaches the server
the statement is on, which PgBouncer forwards), the transaction is rolled back, and the
connection goes back to the pool clean, its next user served (no "current transaction is
aborted")."""

from __future__ import annotations

import time

import asyncpg
import pytest

from proxy.store.db import DatabaseTimeout, create_pool, pooler_kwargs

BOUND = 0.3
SLEEP = 5.0  # far past the bound: a cancel that did not reach the server waits it out


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
async def test_a_statement_cancelled_mid_transaction_leaves_its_connection_clean(
    db_dsn: str, request: pytest.FixtureRequest, route: str
) -> None:
    dsn, kwargs = db_dsn, {}
    if route == "pgbouncer":
        dsn, kwargs = (
            request.getfixturevalue("pgbouncer").pooled(db_dsn),
            pooler_kwargs("transaction"),
        )
    admin = await asyncpg.connect(db_dsn)
    pool = await create_pool(dsn, min_size=1, max_size=1, command_timeout=BOUND, **kwargs)
    try:
        await admin.execute("CREATE TABLE cancel_probe (x int)")
        started = time.monotonic()
        async with pool.acquire() as conn:
            with pytest.raises(DatabaseTimeout):
                async with conn.transaction():
                    await conn.execute("INSERT INTO cancel_probe VALUES (1)")
                    await conn.execute(f"SELECT pg_sleep({SLEEP})")
        async with pool.acquire() as conn:  # the same one: the pool has one
            assert await conn.fetchval("SELECT count(*) FROM cancel_probe") == 0
            assert await conn.fetchval("SELECT 1") == 1
        assert time.monotonic() - started < SLEEP - 1
        running = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE state = 'active' AND query LIKE 'SELECT pg_sleep(%'"
        )
        assert await admin.fetchval(running) == 0
    finally:
        await pool.close()
        await admin.close()


async def test_a_statement_given_its_own_bound_is_said_cancelled_after_that_one(
    db_dsn: str,
) -> None:
    """A call's own ``timeout`` (a session change's work: ``sessions.CHANGE_SECONDS``) is the
    bound its 503's message names, not the pool's."""
    pool = await create_pool(db_dsn, min_size=1, max_size=1, command_timeout=BOUND)
    try:
        with pytest.raises(DatabaseTimeout, match="within 0.6 s"):
            await pool.execute(f"SELECT pg_sleep({SLEEP})", timeout=0.6)
    finally:
        await pool.close()
