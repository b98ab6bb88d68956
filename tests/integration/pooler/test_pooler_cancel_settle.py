"""Through PgBouncer in transaction mode, a connection whose statement ran out of its time
waits for the cancel's answer through an empty query before its next statement: served once
the answer came, in a transaction or not (there the ROLLBACK alone follows, as PostgreSQL
binds nothing else in a failed transaction); held by a pause, it gives up after
``db.CANCEL_GRACE`` and closes the connection, a :class:`DatabaseTimeout` (a 503)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from proxy.store import db
from proxy.store.db import create_pool, pooler_kwargs
from tests.integration.pooler.conftest import own_pgbouncer
from tests.integration.pooler.pgbouncer import PgBouncer

BOUND = 10.0  # the pool's statement bound: far past the grace
GRACE = 0.3


@pytest.fixture
def bouncer(db_dsn: str) -> Iterator[PgBouncer]:
    with own_pgbouncer(db_dsn, pool_size=4) as own:
        yield own


async def _pool(bouncer: PgBouncer, db_dsn: str) -> db.asyncpg.Pool:
    return await create_pool(
        bouncer.pooled(db_dsn),
        min_size=1,
        max_size=1,
        command_timeout=BOUND,
        **pooler_kwargs("transaction"),
    )


@pytest.mark.parametrize("in_transaction", [False, True])
async def test_a_timed_out_statements_connection_serves_the_next_statement(
    bouncer: PgBouncer, db_dsn: str, in_transaction: bool
) -> None:
    pool = await _pool(bouncer, db_dsn)
    try:
        async with pool.acquire() as conn:
            with pytest.raises(db.DatabaseTimeout):
                if in_transaction:
                    async with conn.transaction():
                        await conn.execute("SELECT pg_sleep(5)", timeout=0.2)
                else:
                    await conn.execute("SELECT pg_sleep(5)", timeout=0.2)
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT 1") == 1
            assert not conn.cancel_unsettled
    finally:
        await asyncio.wait_for(pool.close(), 10)


async def test_a_pause_holding_the_cancels_answer_closes_the_connection_after_the_grace(
    bouncer: PgBouncer, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "CANCEL_GRACE", GRACE)
    pool = await _pool(bouncer, db_dsn)
    try:
        async with pool.acquire() as conn:
            await bouncer.console("PAUSE")
            try:
                with pytest.raises(db.DatabaseTimeout):
                    await conn.execute("SELECT 1", timeout=0.2)  # held by the pause
                assert conn.cancel_unsettled
                started = time.monotonic()
                with pytest.raises(db.DatabaseTimeout, match="cancel"):
                    await conn.fetchval("SELECT 1")
                took = time.monotonic() - started
            finally:
                await bouncer.console("RESUME")
            assert took < GRACE + 1.5, took
        async with asyncio.timeout(5):  # its connection replaced
            assert await pool.fetchval("SELECT 1") == 1
    finally:
        await asyncio.wait_for(pool.close(), 10)
