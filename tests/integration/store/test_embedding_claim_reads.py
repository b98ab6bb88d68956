"""What the embedding worker's claim reads of ``messages`` per poll, without statistics.

A new database has no statistics on ``messages`` until autovacuum's first ANALYZE; the
worker polls every second whatever they are. Each poll must read a bounded number of rows:
about the batch when the cursor is near the end, at most its window of ids when nothing in
it needs a vector (a rescan of a table embedded already), never the whole table.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from proxy.store import embeddings as store
from tests.integration.store.helpers import create_session
from tests.integration.store.test_plans import _reads

T = "t-claims"
ROWS = 3000
MODEL = "m"
ARGS = (MODEL, ["ret"], ["ret"], False, 16)


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        # this per-test database must stay unanalysed while the test runs
        await c.execute("ALTER TABLE messages SET (autovacuum_enabled = false)")
        await c.execute("ALTER TABLE message_embeddings SET (autovacuum_enabled = false)")
        for session in ("a", "b"):
            await create_session(c, tenant=T, session_id=session, agent="ret", model="m")
            await c.execute(
                """INSERT INTO messages (tenant, session_id, pos, hash, role, message)
                   SELECT $1, $2, g, md5($2 || g), 'user',
                          json_build_object('role', 'user', 'content', 'x')
                   FROM generate_series(0, $3 - 1) g""",
                T,
                session,
                ROWS,
            )
        yield c


@pytest.fixture(params=["force_custom_plan", "force_generic_plan"])
async def planned(conn: Any, request: pytest.FixtureRequest) -> Any:
    await conn.execute(f"SET plan_cache_mode = {request.param}")
    yield conn


async def _message_rows_read(conn: Any, after_id: int) -> float:
    """Rows of ``messages`` the claim reads: its window, and the first and last ids."""
    tx = conn.transaction()  # the claim's insert is undone: only its reads count
    await tx.start()
    try:
        assert await conn.fetchval("SELECT reltuples FROM pg_class WHERE relname = 'messages'") < 0
        plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {store.CLAIM}", after_id, *ARGS)
    finally:
        await tx.rollback()
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return sum(_reads(root, "messages"))


async def _claim(conn: Any, after_id: int) -> tuple[list[store.Claimed], int | None, bool]:
    model, agents, configured, default_on, limit = ARGS
    return await store.claim_unembedded(
        conn,
        model=model,
        after_id=after_id,
        agents=agents,
        configured=configured,
        default_on=default_on,
        limit=limit,
    )


async def test_a_poll_near_the_end_reads_about_its_batch(planned: Any) -> None:
    conn = planned
    last = await conn.fetchval("SELECT max(id) FROM messages")
    assert await _message_rows_read(conn, last - 10) <= 10 + 2


async def test_a_poll_over_embedded_messages_reads_a_window_and_moves_on(planned: Any) -> None:
    conn = planned
    await conn.execute(
        "INSERT INTO message_embeddings (message_id, model, tenant, session_id, pos, dim)"
        " SELECT id, $1, tenant, session_id, pos, 0 FROM messages",
        MODEL,
    )
    assert await _message_rows_read(conn, 0) <= store.CLAIM_WINDOW + 2
    claimed, last, at_end = await _claim(conn, 0)
    assert claimed == [] and last is not None and not at_end  # the scan goes on from there
    seen, ends = 1, []
    while last is not None:
        claimed, last, at_end = await _claim(conn, last)
        assert claimed == []
        seen += 1
        ends.append(at_end)
    assert seen >= 2 * ROWS // store.CLAIM_WINDOW
    assert ends[-2:] == [True, True] and not any(ends[:-2])  # the last window, then none


async def test_the_scan_claims_every_message_past_gaps_in_the_ids(conn: Any) -> None:
    """A gap in the ids (a deleted session's messages) costs no poll: a window starts at
    the first id past the cursor. The end of the table still answers None."""
    await conn.execute(
        "DELETE FROM messages WHERE session_id = 'a' OR (session_id = 'b' AND pos % 2 = 1)"
    )
    claimed, last, polls = [], 0, 0
    while last is not None:
        got, last, _ = await _claim(conn, last)
        claimed += got
        polls += 1
    assert len(claimed) == ROWS // 2 and polls <= ROWS // 2 // 16 + 2
    assert len({c.message_id for c in claimed}) == len(claimed)
