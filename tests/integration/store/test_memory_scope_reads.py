"""A session's facts are read from its own two scopes only (``store.memory.session_facts``,
migration 0035): a session whose scopes are small, in a tenant where another agent's scope
holds many facts, reads its few rows, not the tenant's every fact in id order."""

from __future__ import annotations

import json
from typing import Any

from proxy.store import memory
from tests.integration.store.helpers import T, create_session

BIG = 20_000


def _rows_read(plan: Any) -> int:
    """The rows every scan of ``memory`` in the plan read (its loops included)."""
    read = 0
    if plan.get("Relation Name") == "memory":
        read += int(plan["Actual Rows"] * plan["Actual Loops"])
        read += int(plan.get("Rows Removed by Filter", 0))
    for child in plan.get("Plans", []):
        read += _rows_read(child)
    return read


async def _fill(conn: Any) -> None:
    """A large scope (``agent:a``) beside a small one and ``global``, analysed."""
    fill = (
        "INSERT INTO memory (tenant, scope, fact) SELECT $1, $2, $3 || i"
        " FROM generate_series(1, $4) i"
    )
    await conn.execute(fill, T, "agent:a", "a fact ", BIG)
    await conn.execute(fill, T, "global", "a global fact ", 5)
    await conn.execute(fill, T, "agent:b", "b fact ", 3)
    await conn.execute("ANALYZE memory")


async def test_a_small_scope_beside_a_large_one_reads_its_own_rows(conn: Any) -> None:
    for sid, agent in (("big", "a"), ("small", "b"), ("plain", "default")):
        await create_session(conn, tenant=T, session_id=sid, agent=agent, model=None)
    await _fill(conn)
    explain = "EXPLAIN (ANALYZE, FORMAT JSON) " + memory.SESSION_FACTS
    for sid, facts in (("small", 8), ("plain", 5), ("big", 2002)):
        answer = await conn.fetchval(explain, T, sid, 2002, 0)
        plan = (json.loads(answer) if isinstance(answer, str) else answer)[0]["Plan"]
        assert plan["Actual Rows"] == facts
        assert _rows_read(plan) <= facts + 10, (sid, _rows_read(plan))
    small = await memory.session_facts(conn, tenant=T, session_id="small")
    assert small == [f"a global fact {i}" for i in range(1, 6)] + [f"b fact {i}" for i in (1, 2, 3)]
    assert await memory.session_facts(conn, tenant=T, session_id="none") == []
