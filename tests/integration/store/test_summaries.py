"""proxy/store/summaries.py and the window load against a real PostgreSQL (issue #4 items 1, 4).

Summaries are versioned rows with the boundary they cover; a divergence invalidates exactly the
ones that folded a changed message; and after a compaction a request reads O(window): the
leading system messages plus the messages since the boundary, in a fixed number of statements,
whatever the length of the history.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from proxy.cascade.tokens import make_counter
from proxy.config import ContextConfig
from proxy.history import chain
from proxy.services.history import SessionState, load_window, reconcile_and_load
from proxy.store import messages as msgs, sessions, summaries
from tests.integration.store.test_messages import asyncpg_internal

T, S = "t-a", "s1"
COUNT = make_counter()
CTX = ContextConfig()


def history(n: int, tag: str = "m") -> list[dict[str, Any]]:
    """A system message and ``n`` alternating user/assistant messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": f"{tag}{i} " * 20})
    return out


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        await sessions.upsert_session(c, tenant=T, session_id=S, agent="default", model="m")
        yield c


async def store(conn: Any, messages: Sequence[dict[str, Any]], session: str = S) -> SessionState:
    state, _ = await reconcile_and_load(
        conn,
        tenant=T,
        session_id=session,
        agent="default",
        model="m",
        messages=messages,
        ctx=CTX,
        count=COUNT,
    )
    return state


async def summarise(conn: Any, boundary: int, content: str, session: str = S) -> int | None:
    row = await conn.fetchrow(
        "SELECT hash FROM messages WHERE tenant = $1 AND session_id = $2 AND pos = $3"
        " AND superseded_at IS NULL",
        T,
        session,
        boundary - 1,
    )
    return await summaries.insert_summary(
        conn,
        tenant=T,
        session_id=session,
        boundary=boundary,
        boundary_hash=row["hash"] if row else None,
        content=content,
        tokens=len(content) // 4,
        model="fast-model",
    )


# ----------------------------------------------------------------------------- versions


async def test_versions_count_up_per_session_and_the_latest_valid_one_wins(conn: Any) -> None:
    await sessions.upsert_session(conn, tenant=T, session_id="s2", agent="default", model="m")
    await store(conn, history(30))
    await store(conn, history(30), session="s2")
    assert await summaries.fetchrow_latest(conn, tenant=T, session_id=S) is None
    assert [await summarise(conn, b, f"v{b}") for b in (5, 11, 21)] == [1, 2, 3]
    assert await summarise(conn, 9, "other", session="s2") == 1
    latest = await summaries.fetchrow_latest(conn, tenant=T, session_id=S)
    assert (latest["version"], latest["boundary"], latest["content"]) == (3, 21, "v21")
    rows = await summaries.fetch_summaries(conn, tenant=T, session_id=S)
    assert [(r["version"], r["boundary"]) for r in rows] == [(1, 5), (2, 11), (3, 21)]
    other = await summaries.fetchrow_latest(conn, tenant="t-b", session_id=S)
    assert other is None, "summaries are scoped by tenant"


async def test_invalidation_hits_only_summaries_that_folded_a_changed_message(
    conn: Any,
) -> None:
    await store(conn, history(30))
    for b in (5, 11, 21):
        await summarise(conn, b, f"v{b}")
    # position 11 changed: v3 folded it (boundary 21 > 11), v2 ends just before it
    await summaries.invalidate_after(conn, tenant=T, session_id=S, pos=11)
    rows = await summaries.fetch_summaries(conn, tenant=T, session_id=S)
    assert [r["invalidated_at"] is not None for r in rows] == [False, False, True]
    latest = await summaries.fetchrow_latest(conn, tenant=T, session_id=S)
    assert latest["version"] == 2
    # versions keep counting after an invalidation: rows are never reused
    assert await summarise(conn, 15, "v15") == 4


async def test_an_edit_before_the_boundary_falls_back_to_the_older_valid_summary(
    conn: Any,
) -> None:
    original = history(30)
    await store(conn, original)
    await summarise(conn, 6, "old")
    await summarise(conn, 20, "new")
    edited = [*original[:10], {"role": "user", "content": "edited"}, *original[11:]]
    state = await store(conn, edited)
    assert (state.summary, state.boundary) == ("old", 6)
    assert list(state.window) == [edited[0], *edited[6:]]
    assert state.superseded == 21


async def test_a_summary_whose_boundary_message_was_superseded_is_not_written(
    conn: Any,
) -> None:
    original = history(20)
    await store(conn, original)
    row = await conn.fetchrow(
        "SELECT hash FROM messages WHERE tenant = $1 AND session_id = $2 AND pos = 9", T, S
    )
    # the client edits position 3 while the fast model is thinking
    await store(conn, [*original[:3], {"role": "user", "content": "edited"}, *original[4:]])
    version = await summaries.insert_summary(
        conn,
        tenant=T,
        session_id=S,
        boundary=10,
        boundary_hash=row["hash"],
        content="stale",
        tokens=1,
        model="fast-model",
    )
    assert version is None
    assert await summaries.fetch_summaries(conn, tenant=T, session_id=S) == []
    assert await summarise(conn, 10, "fresh") == 1


# ----------------------------------------------------------------------------- O(window)


class Counting:
    """Wraps a connection: counts statements and the rows they return."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.statements: list[str] = []
        self.rows = 0

    def _seen(self, query: str, rows: int) -> None:
        self.statements.append(query)
        self.rows += rows

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        out = await self.conn.fetch(query, *args)
        self._seen(query, len(out))
        return out

    async def fetchrow(self, query: str, *args: Any) -> Any:
        out = await self.conn.fetchrow(query, *args)
        self._seen(query, out is not None)
        return out

    async def fetchval(self, query: str, *args: Any) -> Any:
        out = await self.conn.fetchval(query, *args)
        self._seen(query, 1)
        return out

    async def execute(self, query: str, *args: Any) -> str:
        out = await self.conn.execute(query, *args)
        self._seen(query, 0)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


async def _next_request(conn: Any, n: int, boundary: int, session: str) -> Counting:
    await sessions.upsert_session(conn, tenant=T, session_id=session, agent="default", model="m")
    messages = history(n, tag=session)
    await store(conn, messages, session=session)
    await summarise(conn, boundary, "briefing", session=session)
    counting = Counting(conn)
    state = await store(counting, [*messages, {"role": "user", "content": "next"}], session=session)
    assert state.summary == "briefing" and state.boundary == boundary
    assert len(state.window) == 1 + (n + 2 - boundary)  # system + messages since boundary
    return counting


async def test_a_request_after_a_compaction_reads_only_the_window(conn: Any) -> None:
    short = await _next_request(conn, 40, 30, "short")
    long = await _next_request(conn, 1000, 990, "long")
    # the same statements, whatever the length of the history …
    assert long.statements == short.statements
    # … and the rows they return are the window, not the history
    assert long.rows == short.rows
    assert long.rows < 40


async def test_load_window_is_two_statements(conn: Any) -> None:
    messages = history(200)
    state = await store(conn, messages)
    await summarise(conn, 190, "briefing")
    seen: list[str] = []
    conn.add_query_logger(lambda q: seen.append(q.query))
    state = await load_window(conn, tenant=T, session_id=S, state=state)
    await asyncio.sleep(0)  # loggers run via call_soon
    assert [q for q in seen if not asyncpg_internal(q)] == [
        summaries.FETCHROW_LATEST,
        msgs.FETCH_WINDOW,
    ]
    assert list(state.window) == [messages[0], *messages[190:]]


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan] if "Scan" in plan["Node Type"] else []
    for child in plan.get("Plans", ()):
        nodes += _scans(child)
    return nodes


async def test_the_window_query_touches_only_window_rows_in_the_database(conn: Any) -> None:
    for session in (S, "s2"):
        await sessions.upsert_session(
            conn, tenant=T, session_id=session, agent="default", model="m"
        )
        hist = history(2000, tag=session)
        hashes = chain(hist)
        rows = [
            msgs.NewMessage(pos=i, hash=hashes[i], role=m["role"], message=m)
            for i, m in enumerate(hist)
        ]
        await msgs.insert_messages(conn, tenant=T, session_id=session, rows=rows)
    await conn.execute("ANALYZE messages")
    raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + msgs.FETCH_WINDOW, T, S, 1, 1990)
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    scans = _scans(plan)
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), plan
    touched = sum(n["Actual Rows"] + n.get("Rows Removed by Filter", 0) for n in scans)
    assert touched <= 2 * (1 + 11), plan  # index scans and their heap visit: the window only
