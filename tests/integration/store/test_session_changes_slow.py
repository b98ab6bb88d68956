"""A reset, delete or branch whose work outlasts the pool's bound on a statement
(``CASCADE_DB_STATEMENT_TIMEOUT_SECONDS``) still completes: its work grows with the session,
and a cancel there would fail it at every retry. A trigger's ``pg_sleep`` stands in for a
long session's rows; the wait for the session's row lock keeps the request's bound."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from proxy.store import sessions
from proxy.store.db import DatabaseTimeout, create_pool
from tests.integration.store.helpers import T, counts, make_session

BOUND = 0.3  # the pool's bound on a statement here
SLOW = """
CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.2); RETURN COALESCE(NEW, OLD); END $$;
CREATE TRIGGER slow BEFORE {event} ON {table} FOR EACH ROW EXECUTE FUNCTION slow_row();
"""


@pytest.fixture
async def bounded(db_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(db_dsn, command_timeout=BOUND)
    try:
        await make_session(pool, "s", n=3)
        yield pool
    finally:
        await pool.close()


async def test_a_delete_longer_than_the_bound_completes(bounded: asyncpg.Pool) -> None:
    await bounded.execute(SLOW.format(event="DELETE", table="messages"))
    assert await sessions.delete_session(bounded, tenant=T, session_id="s")
    assert await bounded.fetchval("SELECT count(*) FROM sessions") == 0


async def test_a_reset_longer_than_the_bound_completes(bounded: asyncpg.Pool) -> None:
    await bounded.execute(SLOW.format(event="DELETE", table="messages"))
    assert await sessions.reset_session(bounded, tenant=T, session_id="s")
    assert (await counts(bounded, "s"))["messages"] == 0


async def test_a_branch_longer_than_the_bound_completes(bounded: asyncpg.Pool) -> None:
    await bounded.execute(SLOW.format(event="INSERT", table="messages"))
    assert await sessions.copy_session(bounded, tenant=T, source="s", target="b")
    assert (await counts(bounded, "b"))["messages"] == 3


async def test_the_wait_for_the_session_row_keeps_the_bound(bounded: asyncpg.Pool) -> None:
    """A transaction holding the row (an operator's ``SELECT … FOR UPDATE``) is waited on
    for the request's bound only: the operation is a 503 to retry, nothing changed."""
    async with bounded.acquire() as other, other.transaction():
        await other.execute("SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE")
        with pytest.raises(DatabaseTimeout):
            await sessions.delete_session(bounded, tenant=T, session_id="s")
    assert (await counts(bounded, "s"))["messages"] == 3
