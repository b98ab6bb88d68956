"""What reading a session's row costs as its history grows.

A compaction reads the session's row first (its claim, its agent), the event stream reads it
when it opens, and every session route checks the session exists through it; a session that
has run thousands of steps must not make each of those reads visit every message it stored.
Only the session's ``show`` view counts its superseded messages.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from proxy.store import sessions
from tests.integration.store.helpers import create_session
from tests.integration.store.test_plans import _reads

T = "t-reads"


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        for session, rows in (("short", 10), ("long", 2000)):
            await create_session(c, tenant=T, session_id=session, agent="default", model="m")
            await c.execute(
                """INSERT INTO messages (tenant, session_id, pos, hash, role, message, tokens,
                                         superseded_at)
                   SELECT $1, $2, g, md5($2 || g), 'user',
                          json_build_object('role', 'user', 'content', 'x'), 1,
                          CASE WHEN g % 2 = 0 THEN now() END
                   FROM generate_series(0, $3 - 1) g""",
                T,
                session,
                rows,
            )
        await c.execute("ANALYZE messages")
        yield c


async def _message_rows_read(conn: Any, sql: str, session: str) -> float:
    plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", T, session)
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return sum(_reads(root, "messages"))


async def test_reading_a_sessions_row_reads_none_of_its_messages(conn: Any) -> None:
    for session in ("short", "long"):
        assert await _message_rows_read(conn, sessions.FETCHROW_SESSION, session) == 0
    row = await sessions.fetchrow_session(conn, tenant=T, session_id="long")
    assert row is not None and row["agent"] == "default"


async def test_the_superseded_count_is_still_shown(conn: Any) -> None:
    assert await sessions.count_superseded(conn, tenant=T, session_id="long") == 1000
    assert await sessions.count_superseded(conn, tenant=T, session_id="short") == 5
