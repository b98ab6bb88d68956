"""Migration 0010's trigger as migration 0020 leaves it: a spill under a new tool call id
(nearly every spill) costs one index probe and never touches tool_raw_output_versions; a
new text under a known id still moves the one it replaces there."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from proxy.store import raw_outputs
from tests.integration.store.helpers import create_session

T, S = "t-a", "s1"

SPILL = """
INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content, original_bytes, capped)
VALUES ($1, $2, $3, $4, length($4), false)
ON CONFLICT (tenant, session_id, tool_call_id) DO NOTHING
"""
VERSIONS_LOCKED = """
SELECT count(*) FROM pg_locks
WHERE pid = pg_backend_pid() AND relation = 'tool_raw_output_versions'::regclass
"""


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        await create_session(c, tenant=T, session_id=S, agent="default", model="m")
        yield c


async def versions(conn: Any) -> list[str]:
    rows = await conn.fetch(
        "SELECT content FROM tool_raw_output_versions WHERE tenant = $1 AND session_id = $2"
        " ORDER BY replaced_at",
        T,
        S,
    )
    return [r["content"] for r in rows]


async def test_a_new_tool_call_id_spills_without_touching_the_versions(conn: Any) -> None:
    """The statement that moves a replaced output opens (and locks) the versions table even
    when it moves nothing; a new id must not run it."""
    async with conn.transaction():
        await conn.execute(SPILL, T, S, "c1", "first")
        assert await conn.fetchval(VERSIONS_LOCKED) == 0
    row = await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c1")
    assert row is not None and row["content"] == "first"
    assert await versions(conn) == []


async def test_a_known_id_keeps_its_replaced_text_and_an_identical_copy_nothing(
    conn: Any,
) -> None:
    await conn.execute(SPILL, T, S, "c1", "first")
    async with conn.transaction():
        await conn.execute(SPILL, T, S, "c1", "first")  # the same text again: left as is
    assert await versions(conn) == []
    await conn.execute(SPILL, T, S, "c1", "second")
    await conn.execute(SPILL, T, S, "c1", "third")
    row = await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c1")
    assert row is not None and row["content"] == "third"
    assert await versions(conn) == ["first", "second"]
