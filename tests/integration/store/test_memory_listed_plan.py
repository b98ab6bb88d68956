"""The memory API's list (``store.memory.FETCH_LISTED``) reads each listed scope's own rows
under a generic plan too, which PostgreSQL may switch a prepared statement to after five
runs (asyncpg prepares every statement): a small scope beside a large one is not found by
walking the tenant's every fact in id order."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.store import memory
from tests.integration.store.helpers import T, create_session
from tests.integration.store.test_memory_scope_reads import BIG, _fill, _rows_read

TYPES = "text, text[], bigint, bigint, bigint"


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
async def test_a_small_scope_is_listed_from_its_own_rows_under_either_plan(
    conn: Any, mode: str
) -> None:
    await _fill(conn)
    await conn.execute(f"SET plan_cache_mode = {mode}")
    await conn.execute(f"PREPARE listed ({TYPES}) AS {memory.FETCH_LISTED}")
    for scopes, limit, after, rows in (
        (["agent:b"], 101, 0, 3),
        (["global", "agent:b"], 101, 0, 8),
        (["agent:b"], None, 0, 3),
        (["agent:a"], 101, BIG // 2, 101),
    ):
        args = f"'{T}', ARRAY{scopes!r}::text[], {limit or 'NULL'}, 0, {after}"
        answer = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE listed({args})")
        plan = (json.loads(answer) if isinstance(answer, str) else answer)[0]["Plan"]
        assert plan["Actual Rows"] == rows
        assert _rows_read(plan) <= rows + 10, (scopes, _rows_read(plan))
    await conn.execute("DEALLOCATE listed; RESET plan_cache_mode")


async def test_the_list_reads_each_scope_once_in_id_order(conn: Any) -> None:
    await create_session(conn, tenant=T, session_id="s", agent="b", model=None)
    await _fill(conn)

    async def listed(scopes: list[str], **kw: Any) -> list[str]:
        rows = await memory.fetch_listed_facts(conn, tenant=T, scopes=scopes, **kw)
        return [row["text"] for row in rows]

    both = [f"a global fact {i}" for i in range(1, 6)] + [f"b fact {i}" for i in (1, 2, 3)]
    assert await listed(["agent:b", "global", "agent:b"]) == both  # a scope named twice
    assert await listed(["global", "agent:b"], limit=3, offset=4) == both[4:7]
    first = (await memory.fetch_listed_facts(conn, tenant=T, scopes=["global"]))[0]["id"]
    assert await listed(["global", "agent:b"], after=first, limit=2) == both[1:3]
    assert await listed(["agent:a"], limit=2, offset=BIG - 1) == [f"a fact {BIG}"]
    assert await listed(["none"]) == []
    assert await listed(["agent:a"], limit=2, offset=2**63 - 1) == []  # no bigint overflow


PLAIN = """
SELECT m.id, m.scope, m.fact AS text, m.source_session, m.created_at, s.agent AS source_agent
FROM memory m LEFT JOIN sessions s ON s.tenant = m.tenant AND s.id = m.source_session
WHERE m.tenant = $1 AND m.scope = ANY($2::text[]) AND m.id > $5
ORDER BY m.id LIMIT $3 OFFSET $4
"""
"""The list's plain form (one filter, one order), the oracle the per-scope ranges match."""


async def test_the_list_answers_as_its_plain_form_does(conn: Any) -> None:
    await create_session(conn, tenant=T, session_id="s", agent="b", model=None)
    await create_session(conn, tenant="other", session_id="s", agent="x", model=None)
    fill = (
        "INSERT INTO memory (tenant, scope, fact, source_session)"
        " SELECT $1, $2, $2 || ' ' || i, CASE WHEN i % 2 = 0 THEN 's' END"
        " FROM generate_series(1, $3) i"
    )
    for tenant, scope, n in ((T, "global", 7), (T, "agent:b", 5), ("other", "agent:b", 6)):
        await conn.execute(fill, tenant, scope, n)
    await conn.execute(fill, T, "global", 3)  # interleaved ids across scopes
    ids = [r["id"] for r in await conn.fetch(PLAIN, T, ["global"], None, 0, 0)]
    for scopes in (["global"], ["agent:b", "global"], ["global", "global"], ["none"], []):
        for limit, offset, after in ((None, 0, 0), (3, 0, 0), (4, 5, 0), (2, 1, ids[2])):
            args = (T, scopes, limit, offset, after)
            want = [dict(r) for r in await conn.fetch(PLAIN, *args)]
            got = [dict(r) for r in await conn.fetch(memory.FETCH_LISTED, *args)]
            assert got == want, args
