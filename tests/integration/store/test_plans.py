"""How PostgreSQL reads a session's window when it has no statistics on messages (0009).

A new database has none until autovacuum's first ANALYZE. The planner then rates every
index that leads with (tenant, session_id) alike, so an index without ``pos`` after them
would read the whole session for a window of a few rows, on whichever pooled connection
cached that plan (bench/growth: 5,000 rows read for a 10-row window). The divergence lookup
is held to the same standard: it reads no more rows than the hashes it compares.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from proxy.store import messages as msgs
from tests.integration.store.helpers import create_session

T = "t-plans"
ROWS = 3000
WINDOW_FROM = ROWS - 10


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        # this per-test database must stay unanalysed while the test runs
        await c.execute("ALTER TABLE messages SET (autovacuum_enabled = false)")
        for session in ("long", "other"):
            await create_session(c, tenant=T, session_id=session, agent="default", model="m")
            await c.execute(
                """INSERT INTO messages (tenant, session_id, pos, hash, role, message, tokens,
                                         tool_call_id)
                   SELECT $1, $2, g, md5($2 || g), 'tool',
                          json_build_object('role', 'tool', 'content', repeat('x', 400)), 100,
                          'call_' || g
                   FROM generate_series(0, $3 - 1) g""",
                T,
                session,
                ROWS,
            )
        yield c


def _reads(node: dict[str, Any], relation: str) -> Iterator[float]:
    """Rows each scan of ``relation`` in the plan fetched: returned plus filtered out."""
    if node.get("Relation Name") == relation:
        loops = node.get("Actual Loops", 1)
        yield (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * loops
    for child in node.get("Plans", ()):
        yield from _reads(child, relation)


@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_the_window_reads_only_its_rows_without_statistics(conn: Any, mode: str) -> None:
    analyzed = await conn.fetchval(
        "SELECT reltuples FROM pg_class WHERE oid = 'messages'::regclass"
    )
    assert analyzed < 0, "the table must not have been analyzed yet"
    await conn.execute(f"SET plan_cache_mode = {mode}")
    await conn.execute(f"PREPARE w(text, text, integer, integer) AS {msgs.FETCH_WINDOW}")
    try:
        for _ in range(6):  # past the plan cache's five custom plans
            await conn.execute(f"EXECUTE w('{T}', 'long', 1, {WINDOW_FROM})")
        plan = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE w('{T}', 'long', 1, {WINDOW_FROM})"
        )
    finally:
        await conn.execute("DEALLOCATE w")
        await conn.execute("RESET plan_cache_mode")
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    assert root["Actual Rows"] == 1 + ROWS - WINDOW_FROM
    assert sum(_reads(root, "messages")) <= 2 * (1 + ROWS - WINDOW_FROM)


async def test_every_index_the_window_can_use_continues_with_pos(conn: Any) -> None:
    rows = await conn.fetch(
        """SELECT i.indexrelid::regclass::text AS name,
                  array(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY k(attnum, n)
                        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                        ORDER BY k.n) AS columns,
                  pg_get_expr(i.indpred, i.indrelid) AS predicate
           FROM pg_index i WHERE i.indrelid = 'messages'::regclass"""
    )
    # a partial index serves the window only if the window's conditions imply its predicate
    usable = {None, "(superseded_at IS NULL)"}
    leading = {
        r["name"]: list(r["columns"])
        for r in rows
        if r["columns"][:2] == ["tenant", "session_id"] and r["predicate"] in usable
    }
    assert "messages_live_pos" in leading
    assert {name: cols[2] for name, cols in leading.items()} == dict.fromkeys(leading, "pos")


async def test_the_divergence_lookup_reads_no_more_rows_than_it_was_given(conn: Any) -> None:
    # a client that resends 10 messages of a 3,000-message session: 10 rows to compare
    hashes = [f"md5-{i}" for i in range(10)]
    plan = await conn.fetchval(
        f"EXPLAIN (ANALYZE, FORMAT JSON) {msgs.FETCH_MATCHED_LEN}", T, "long", hashes
    )
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    assert sum(_reads(root, "messages")) <= len(hashes)
