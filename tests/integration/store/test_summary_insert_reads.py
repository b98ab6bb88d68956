"""What storing a summary reads as the session's history grows.

The insert checks that the span it folded still ends the live history below its boundary
(``summaries.insert_summary``). That check looks at the rows just below the boundary; it must
not visit every row the session (or the table) holds, which a lookup by hash alone did: no
index leads with it, so PostgreSQL read the whole table for each compaction.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from proxy.store import summaries
from tests.integration.store.helpers import create_session
from tests.integration.store.test_plans import _reads

T = "t-summary-reads"
SIZES = {"short": 40, "long": 3000}


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        for session, rows in SIZES.items():
            await create_session(c, tenant=T, session_id=session, agent="default", model="m")
            await c.execute(
                """INSERT INTO messages (tenant, session_id, pos, hash, role, message, tokens,
                                         trimmed_at)
                   SELECT $1, $2, g, md5($2 || g), 'user',
                          json_build_object('role', 'user', 'content', 'x'), 1,
                          CASE WHEN g % 7 = 0 THEN now() END
                   FROM generate_series(0, $3 - 1) g""",
                T,
                session,
                rows,
            )
        await c.execute("ANALYZE messages")
        yield c


async def _insert(conn: Any, session: str, boundary: int, hash_: str) -> tuple[float, bool]:
    """Rows of messages the insert read, and whether it stored the summary (rolled back)."""
    async with conn.transaction():
        plan = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {summaries.INSERT_SUMMARY}",
            *(T, session, boundary, hash_, "brief", 1, "m", None, None),
        )
        root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
        stored = root["Actual Rows"] == 1
        raise _Rollback(sum(_reads(root, "messages")), stored)


class _Rollback(Exception):
    def __init__(self, read: float, stored: bool) -> None:
        self.read, self.stored = read, stored


async def _try(conn: Any, session: str, boundary: int, hash_: str) -> tuple[float, bool]:
    try:
        await _insert(conn, session, boundary, hash_)
    except _Rollback as done:
        return done.read, done.stored
    raise AssertionError("unreachable")


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_the_insert_reads_as_many_rows_for_a_long_history_as_for_a_short_one(
    conn: Any, mode: str
) -> None:
    await conn.execute(f"SET plan_cache_mode = {mode}")
    read = {}
    for session, rows in SIZES.items():
        boundary = rows - 20
        hash_ = await conn.fetchval("SELECT md5($1 || $2::int)", session, boundary - 1)
        read[session], stored = await _try(conn, session, boundary, hash_)
        assert stored
    assert read["long"] <= read["short"] + 4, read


async def test_a_span_that_no_longer_ends_below_the_boundary_is_not_stored(conn: Any) -> None:
    older = await conn.fetchval("SELECT md5($1 || $2::int)", "long", 2970)
    assert (await _try(conn, "long", 2980, older))[1] is False  # a later live row follows it
    trimmed = await conn.fetchval("SELECT md5($1 || $2::int)", "long", 2974)
    assert (await _try(conn, "long", 2976, trimmed))[1] is True  # only trimmed rows follow
    assert (await _try(conn, "long", 2980, "no such hash"))[1] is False
