"""proxy/store/summaries.py and the window load against a real PostgreSQL (issue #4 items 1, 4).

Summaries are versioned rows with the boundary they cover; a divergence invalidates exactly the
ones that folded a changed message; and after a compaction a request reads O(window): the
leading system messages plus the messages since the boundary, in a fixed number of statements,
whatever the length of the history.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

from proxy.cascade.tokens import MemoCounter, message_cost
from proxy.config_context import ContextConfig
from proxy.history import chain
from proxy.services import incoming
from proxy.services.history import SessionState, load_window, reconcile_and_load
from proxy.session_id import SessionKey
from proxy.store import leases, messages as msgs, steps, summaries, writes
from tests.integration.store.helpers import OWNER, asyncpg_internal, create_session, insert_messages

T, S = "t-a", "s1"
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
        await create_session(c, tenant=T, session_id=S, agent="default", model="m")
        yield c


def counter() -> MemoCounter:
    """A fresh one per request, as the chat service makes it."""
    return MemoCounter(message_cost(None))


async def store(conn: Any, messages: Sequence[dict[str, Any]], session: str = S) -> SessionState:
    count = counter()
    return await reconcile_and_load(
        conn,
        SessionKey(T, session),
        incoming.read(messages, chain(messages), CTX, count, None),
        agent="default",
        model="m",
        ctx=CTX,
        count=count,
        stamp=lambda evs: ([e.name for e in evs], [dict(e.data) for e in evs]),
        owner=OWNER,  # one replica's requests, one after the other
    )


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
    await create_session(conn, tenant=T, session_id="s2", agent="default", model="m")
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
    await create_session(conn, tenant=T, session_id=session, agent="default", model="m")
    messages = history(n, tag=session)
    await store(conn, messages, session=session)
    await summarise(conn, boundary, "briefing", session=session)
    counting = Counting(conn)
    nxt = {"role": "user", "content": "next"}
    state = await store(counting, [*messages, nxt], session=session)
    assert state.summary == "briefing" and state.boundary == boundary
    # system + messages since the boundary (the stored ones read back, then the new one)
    assert list(state.window) == [messages[0], *messages[boundary:], nxt]
    assert state.positions == (0, *range(boundary, n + 2))
    return counting


async def test_a_request_after_a_compaction_reads_only_the_window(conn: Any) -> None:
    short = await _next_request(conn, 40, 30, "short")
    long = await _next_request(conn, 1000, 990, "long")
    # the same statements, whatever the length of the history: the upsert brings the
    # latest valid summary, one more stores the new message and reads the window …
    assert long.statements == short.statements
    assert short.statements == [steps.BEGIN_STEP, writes.APPEND]
    # … and the rows they return are the window, not the history
    assert long.rows == short.rows
    assert long.rows < 40


async def test_load_window_is_two_statements(conn: Any) -> None:
    messages = history(200)
    state = await store(conn, messages)
    await summarise(conn, 190, "briefing")
    seen: list[str] = []
    conn.add_query_logger(lambda q: seen.append(q.query))
    state = await load_window(conn, SessionKey(T, S), state, counter())
    await asyncio.sleep(0)  # loggers run via call_soon
    assert [q for q in seen if not asyncpg_internal(q)] == [
        summaries.FETCHROW_LATEST,
        msgs.FETCH_WINDOW,
    ]
    assert list(state.window) == [messages[0], *messages[190:]]


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's scans of the history tables (messages, and raw outputs for ``spilled``)."""
    mine = "Scan" in plan["Node Type"] and plan.get("Relation Name") in HISTORY_TABLES
    nodes = [plan] if mine else []
    for child in plan.get("Plans", ()):
        nodes += _scans(child)
    return nodes


HISTORY_TABLES = ("messages", "tool_raw_outputs")
TOOL_EVERY = 4  # every 4th message is a tool result …
RAW_PER_SESSION = 10_000  # … and the raw-output table holds far more than one window's worth


class Explaining:
    """Stands in for a connection: runs the statement under EXPLAIN ANALYZE, keeps the plan."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.plans: list[dict[str, Any]] = []

    async def fetch(self, query: str, *args: Any) -> list[Any]:
        raw = await self.conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + query, *args)
        self.plans.append((json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"])
        return []


def _big_history(session: str) -> list[dict[str, Any]]:
    hist = history(2000, tag=session)
    for i in range(TOOL_EVERY, len(hist), TOOL_EVERY):
        hist[i] = {"role": "tool", "tool_call_id": f"{session}-c{i}", "content": "out"}
    return hist


async def _two_long_sessions(conn: Any) -> list[dict[str, Any]]:
    """Two sessions of 2,001 messages, each with 10,000 stored raw outputs; returns S's."""
    for session in (S, "s2"):
        await create_session(conn, tenant=T, session_id=session, agent="default", model="m")
        hist = _big_history(session)
        hashes = chain(hist)
        rows = [
            msgs.NewMessage(
                pos=i,
                hash=hashes[i],
                role=m["role"],
                message=m,
                tool_call_id=m.get("tool_call_id"),
            )
            for i, m in enumerate(hist)
        ]
        await insert_messages(conn, tenant=T, session_id=session, rows=rows)
        await conn.execute(
            "INSERT INTO tool_raw_outputs (tenant, session_id, tool_call_id, content,"
            " original_bytes) SELECT $1, $2, $2 || '-c' || i, 'raw', 3"
            " FROM generate_series(0, $3 - 1) AS i",
            T,
            session,
            RAW_PER_SESSION,
        )
    await conn.execute("ANALYZE")
    return _big_history(S)


def _assert_window_only(plan: dict[str, Any], window: int) -> None:
    scans = _scans(plan)
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), plan
    # rows each scan produced or filtered away, over all its loops
    touched = {
        table: sum(
            (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
            for n in scans
            if n["Relation Name"] == table
        )
        for table in HISTORY_TABLES
    }
    # index scans and their heap visit: the window only
    assert touched["messages"] <= 2 * window, plan
    # and no probe of the raw outputs per tool result, which decided nothing (migration 0011)
    assert touched["tool_raw_outputs"] == 0, plan


async def test_the_window_query_touches_only_window_rows_in_the_database(conn: Any) -> None:
    hist = await _two_long_sessions(conn)
    explaining = Explaining(conn)
    await msgs.fetch_window(explaining, tenant=T, session_id=S, system_count=1, from_pos=1990)
    _assert_window_only(explaining.plans[0], window=1 + 11)
    got = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=1990)
    assert [r["message"] for r in got] == [hist[0], *hist[1990:]]


XACT_READS = """
SELECT relname, seq_scan, seq_tup_read, idx_tup_fetch FROM pg_stat_xact_user_tables
WHERE relname = ANY($1::text[])
"""


async def _reads(conn: Any) -> dict[str, tuple[int, int, int]]:
    """(seq scans, rows they read, rows index scans fetched) per history table, so far in
    this transaction: what the statements inside a SQL function read, which EXPLAIN of the
    call does not show."""
    rows = await conn.fetch(XACT_READS, list(HISTORY_TABLES))
    return {r["relname"]: (r["seq_scan"], r["seq_tup_read"], r["idx_tup_fetch"]) for r in rows}


async def test_the_append_statement_touches_only_window_rows_in_the_database(
    conn: Any,
) -> None:
    """The statement every request that was not guessed runs (``cascade_append_v2``): its
    read is O(window) too, with the function's first plans and with the generic plan
    PL/pgSQL may switch to after five calls on a connection."""
    hist = await _two_long_sessions(conn)
    new = {"role": "user", "content": "next"}
    hashes = chain([*hist, new])
    window = 1 + 11
    for _ in range(8):
        tx = conn.transaction()
        await tx.start()
        try:  # undo the writes: each call appends the same message
            before = await _reads(conn)
            got = await writes.append_and_fetch_window(
                conn,
                tenant=T,
                session_id=S,
                rows=[msgs.NewMessage(pos=2001, hash=hashes[-1], role="user", message=new)],
                raw=[],
                head_len=2002,
                head_hash=hashes[-1],
                system_count=1,
                old_len=2001,
                from_pos=1990,
            )
            after = await _reads(conn)
        finally:
            await tx.rollback()
        assert [r["pos"] for r in got] == [0, *range(1990, 2001)]
        seq, seq_rows, fetched = (
            [after[t][i] - before[t][i] for t in HISTORY_TABLES] for i in range(3)
        )
        assert seq == [0, 0] and seq_rows == [0, 0], (before, after)
        # index scans and their heap visit: the window only, and no probe of the raw
        # outputs per tool result, which decided nothing (migration 0011)
        assert fetched[0] <= 2 * window and fetched[1] == 0, (before, after)


async def test_a_summary_made_for_another_agent_than_the_sessions_is_not_written(
    conn: Any,
) -> None:
    """The agent check reads the session row in the insert's own statement: a session moved
    to another agent while the fast model answered gets no summary made for the old one."""
    await store(conn, history(20))
    owner = uuid.uuid4()
    claimed = await leases.claim_compaction(conn, tenant=T, session_id=S, owner=owner, ttl=30)
    assert claimed
    await conn.execute("UPDATE sessions SET agent = 'coder' WHERE tenant = $1 AND id = $2", T, S)
    row = await conn.fetchrow(
        "SELECT hash FROM messages WHERE tenant = $1 AND session_id = $2 AND pos = 9", T, S
    )
    common = {"tenant": T, "session_id": S, "boundary": 10, "boundary_hash": row["hash"]}
    made = {"content": "brief", "tokens": 1, "model": "fast-model", "owner": owner}
    assert await summaries.insert_summary(conn, **common, **made, agent="default") is None
    assert await summaries.fetch_summaries(conn, tenant=T, session_id=S) == []
    assert await summaries.insert_summary(conn, **common, **made, agent="coder") == 1
