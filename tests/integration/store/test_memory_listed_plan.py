"""The memory API's list (``store.memory.FETCH_LISTED``) reads each listed scope's own rows
under a generic plan too, which PostgreSQL may switch a prepared statement to after five
runs (asyncpg prepares every statement): a small scope beside a large one is not found by
walking the tenant's every fact in id order."""

from __future__ import annotations

import json
from typing import Any

from proxy.store import memory
from tests.integration.store.helpers import T, create_session
from tests.integration.store.test_memory_scope_reads import BIG, _rows_read

TYPES = "text, text[], bigint, bigint, bigint"


async def _fill(conn: Any) -> None:
    fill = (
        "INSERT INTO memory (tenant, scope, fact) SELECT $1, $2, $3 || i"
        " FROM generate_series(1, $4) i"
    )
    await conn.execute(fill, T, "agent:a", "a fact ", BIG)
    await conn.execute(fill, T, "global", "a global fact ", 5)
    await conn.execute(fill, T, "agent:b", "b fact ", 3)
    await conn.execute("ANALYZE memory")


async def test_a_small_scope_is_listed_from_its_own_rows_under_a_generic_plan(conn: Any) -> None:
    await _fill(conn)
    await conn.execute("SET plan_cache_mode = force_generic_plan")
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
