"""What a compaction's look for interrupted compactions reads as the session ages.

Every compaction first closes the session's compactions that a stopped process left without
a partner (``services/interrupted.py``). A session that has compacted hundreds of times must
not make that look read every compaction event it ever stored, once per started event.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from proxy.store import events
from tests.integration.store.helpers import create_session
from tests.integration.store.test_plans import _reads

T = "t-compactions"
STARTED, COMPLETED = "context.compaction.started", "context.compaction.completed"


async def _compacted(conn: Any, session: str, runs: int, *, last_unpaired: bool) -> None:
    await create_session(conn, tenant=T, session_id=session, agent="default", model="m")
    for n in range(runs):
        await conn.execute(  # a request's events between two compactions
            "INSERT INTO events (tenant, session_id, name, data)"
            " SELECT $1, $2, 'context.usage', '{}' FROM generate_series(1, 8)",
            T,
            session,
        )
        await events.insert_event(conn, tenant=T, session_id=session, name=STARTED, data={"n": n})
        if n < runs - 1 or not last_unpaired:
            await events.insert_event(
                conn, tenant=T, session_id=session, name=COMPLETED, data={"n": n}
            )


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        await _compacted(c, "young", 3, last_unpaired=False)
        await _compacted(c, "old", 300, last_unpaired=False)
        await _compacted(c, "old-stopped", 300, last_unpaired=True)
        yield c


async def _event_rows_read(conn: Any, session: str) -> float:
    plan = await conn.fetchval(
        f"EXPLAIN (ANALYZE, FORMAT JSON) {events.FETCH_UNPAIRED_COMPACTIONS}", T, session
    )
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return sum(_reads(root, "events"))


@pytest.mark.parametrize("analyzed", [False, True])
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_the_look_reads_as_many_events_for_an_old_session_as_for_a_young_one(
    conn: Any, analyzed: bool, mode: str
) -> None:
    if analyzed:
        await conn.execute("ANALYZE events")
    await conn.execute(f"SET plan_cache_mode = {mode}")
    young, old = await _event_rows_read(conn, "young"), await _event_rows_read(conn, "old")
    assert old <= young + 4, (young, old)


async def test_the_latest_compaction_a_stopped_process_left_is_found(conn: Any) -> None:
    assert await events.fetch_unpaired_compactions(conn, tenant=T, session_id="old") == []
    rows = await events.fetch_unpaired_compactions(conn, tenant=T, session_id="old-stopped")
    assert [json.loads(r["data"]) if isinstance(r["data"], str) else r["data"] for r in rows] == [
        {"n": 299}
    ]


@pytest.mark.parametrize("analyzed", [False, True])
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_the_sweep_reads_each_compaction_event_a_few_times_not_once_per_started_one(
    conn: Any, analyzed: bool, mode: str
) -> None:
    """The start-up sweep looks at every started event of every session: pairing each by
    reading the events after it reads a session's compaction events once per compaction."""
    if analyzed:
        await conn.execute("ANALYZE events")
    await conn.execute(f"SET plan_cache_mode = {mode}")
    total = await conn.fetchval(
        "SELECT count(*) FROM events WHERE tenant = $1 AND name LIKE 'context.compaction.%'", T
    )
    for sql, args in [
        (events.FETCH_EVERY_UNPAIRED_COMPACTION, (T, "old-stopped")),
        (events.FETCH_SESSIONS_WITH_UNPAIRED_COMPACTIONS, ()),
    ]:
        plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
        root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
        assert sum(_reads(root, "events")) <= 4 * total, (sql, total)


@pytest.mark.parametrize("analyzed", [False, True])
@pytest.mark.parametrize("mode", ["force_custom_plan", "force_generic_plan"])
async def test_the_look_reads_a_few_events_whatever_the_table_holds(
    conn: Any, analyzed: bool, mode: str
) -> None:
    """The look runs before every compaction: it reads the session's latest started event and
    the partner after it, not every compaction event of the table (a hashed anti join) or
    every event written after it (the next started event looked for in id order)."""
    if analyzed:
        await conn.execute("ANALYZE events")
    await conn.execute(f"SET plan_cache_mode = {mode}")
    for session in ("young", "old", "old-stopped"):
        assert await _event_rows_read(conn, session) <= 8, session
