"""A task cancelled mid-statement (its client gone, a bound of the caller's) while PgBouncer is
paused ends within ``db.CANCEL_GRACE``, not the pool's statement bound: asyncpg sends the
server a cancel for the statement and, before the connection's return to the pool, waits for
the answer, which the pause holds; past the grace (``Pool.release``'s own ``timeout``)
asyncpg closes the connection instead, and the pool serves again once PgBouncer resumes.
In a transaction the pause holds its BEGIN, so the task ends there too; a ROLLBACK after a
cancelled statement is ``tests/integration/store/test_cancel_grace.py``'s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from proxy.store import db
from proxy.store.db import borrowed, create_pool, pooler_kwargs
from tests.integration.pooler.conftest import own_pgbouncer
from tests.integration.pooler.pgbouncer import PgBouncer

BOUND = 10.0  # the pool's statement bound: what the cancelled task waited out before
GRACE = 0.3
CANCEL_AFTER = 0.3


@pytest.fixture
def bouncer(db_dsn: str) -> Iterator[PgBouncer]:
    with own_pgbouncer(db_dsn, pool_size=4) as own:
        yield own


@pytest.mark.parametrize("in_transaction", [False, True])
async def test_a_task_cancelled_mid_statement_during_a_pause_ends_within_the_grace(
    bouncer: PgBouncer, db_dsn: str, monkeypatch: pytest.MonkeyPatch, in_transaction: bool
) -> None:
    monkeypatch.setattr(db, "CANCEL_GRACE", GRACE)
    pool = await create_pool(
        bouncer.pooled(db_dsn),
        min_size=1,
        max_size=1,
        command_timeout=BOUND,
        **pooler_kwargs("transaction"),
    )
    try:
        assert await pool.fetchval("SELECT 1") == 1

        async def work() -> None:
            async with borrowed(pool, 5) as conn:
                if in_transaction:
                    async with conn.transaction():
                        await conn.fetchval("SELECT 1")
                else:
                    await conn.fetchval("SELECT 1")

        await bouncer.console("PAUSE")
        try:
            started = time.monotonic()
            task = asyncio.create_task(work())
            await asyncio.sleep(CANCEL_AFTER)
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=BOUND / 2)
            took = time.monotonic() - started
        finally:
            await bouncer.console("RESUME")
        assert done, "the cancelled task waited for the pause"
        assert task.cancelled()
        assert took < CANCEL_AFTER + GRACE + 1.5, took
        async with asyncio.timeout(5):  # its connection closed and replaced
            assert await pool.fetchval("SELECT 1") == 1
    finally:
        await asyncio.wait_for(pool.close(), 10)
