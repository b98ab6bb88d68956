"""A task cancelled mid-statement whose cancel the server does not answer (held here by
holding asyncpg's cancel request, as a paused pooler or a dead link holds it) ends within
``db.CANCEL_GRACE``: its transaction's ROLLBACK and its connection's return to the pool each
wait that long at most, then the connection is closed and the pool opens another. Direct to
PostgreSQL, so the ROLLBACK path is reached (a paused PgBouncer in transaction mode holds a
statement before its BEGIN, never inside a transaction)."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from proxy.store import db
from proxy.store.db import borrowed, create_pool

GRACE = 0.3
HELD = 30.0  # the cancel request's hold: far past the grace and the test's own wait
SLEEP = 3.0  # the statement's: what asyncpg waits for past the grace, its answer ends it


@pytest.mark.parametrize("in_transaction", [False, True])
async def test_a_cancelled_statement_whose_cancel_goes_unanswered_ends_within_the_grace(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch, in_transaction: bool
) -> None:
    monkeypatch.setattr(db, "CANCEL_GRACE", GRACE)
    pool = await create_pool(db_dsn, min_size=1, max_size=1, command_timeout=HELD)
    try:
        assert await pool.fetchval("SELECT 1") == 1
        running = asyncio.Event()

        async def work() -> None:
            async with borrowed(pool, 5) as conn:
                if in_transaction:
                    async with conn.transaction():
                        await conn.execute("SELECT 1")
                        running.set()
                        await conn.execute(f"SELECT pg_sleep({SLEEP})")
                else:
                    running.set()
                    await conn.execute(f"SELECT pg_sleep({SLEEP})")

        async def held(self: asyncpg.Connection, *args: object, **kwargs: object) -> None:
            await asyncio.sleep(HELD)  # the test's stand-in for an unanswered cancel

        monkeypatch.setattr(asyncpg.Connection, "_cancel", held)
        task = asyncio.create_task(work())
        await running.wait()
        await asyncio.sleep(0.1)  # the statement sent
        started = time.monotonic()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=HELD / 3)
        took = time.monotonic() - started
        assert done, "the cancelled task waited for the cancel's answer"
        # cancelled, or its ROLLBACK's DatabaseTimeout (the grace ran out) raised in its place
        assert task.cancelled() or isinstance(task.exception(), db.DatabaseTimeout)
        assert took < SLEEP - 1, took  # the grace is 0.3 s
        monkeypatch.undo()
        async with asyncio.timeout(5):  # its connection closed and replaced
            assert await pool.fetchval("SELECT 1") == 1
    finally:
        await asyncio.wait_for(pool.close(), 10)
        admin = await asyncpg.connect(db_dsn)  # the uncancelled sleep, gone with its client
        try:
            await admin.execute(SLEEPING)
        finally:
            await admin.close()


SLEEPING = """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE query LIKE 'SELECT pg_sleep(%' AND pid <> pg_backend_pid()"""


async def test_the_grace_bounds_the_cancels_answer_not_the_next_statement(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement that ran out of its time leaves its connection waiting for the cancel's
    answer; once the server gives it, the next statement has its own time, not the grace."""
    monkeypatch.setattr(db, "CANCEL_GRACE", GRACE)
    pool = await create_pool(db_dsn, min_size=1, max_size=1, command_timeout=HELD)
    try:
        async with pool.acquire() as conn:
            with pytest.raises(db.DatabaseTimeout):
                await conn.execute("SELECT pg_sleep(5)", timeout=0.2)
            assert conn.cancel_unsettled
            started = time.monotonic()
            await conn.execute(f"SELECT pg_sleep({GRACE * 3})")  # past the grace: served
            assert time.monotonic() - started >= GRACE * 3
            assert not conn.cancel_unsettled
    finally:
        await asyncio.wait_for(pool.close(), 10)


async def test_a_statement_past_the_pools_bound_is_named_with_it(db_dsn: str) -> None:
    pool = await create_pool(db_dsn, min_size=1, max_size=1, command_timeout=0.2)
    try:
        with pytest.raises(db.DatabaseTimeout, match=r"within 0\.2 s"):
            await pool.fetchval("SELECT pg_sleep(2)")
    finally:
        await asyncio.wait_for(pool.close(), 10)


async def test_a_transaction_whose_statement_was_cancelled_rolls_back(db_dsn: str) -> None:
    """A statement that ran out of its time inside a transaction leaves the transaction
    failed once the cancel is answered: its ROLLBACK is still served, and the connection
    goes on to serve the next statement."""
    pool = await create_pool(db_dsn, min_size=1, max_size=1, command_timeout=HELD)
    try:
        async with pool.acquire() as conn:
            with pytest.raises(db.DatabaseTimeout):
                async with conn.transaction():
                    await conn.execute("SELECT pg_sleep(5)", timeout=0.2)
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await asyncio.wait_for(pool.close(), 10)
