"""proxy/store/messages.py against a real, migrated PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from asyncpg import introspection

from proxy.history import chain
from proxy.store import messages as msgs, sessions

T, S = "t-a", "s1"
_INTROSPECTION = {
    introspection.INTRO_LOOKUP_TYPES,
    introspection.INTRO_LOOKUP_TYPES_13,
    introspection.TYPE_BY_NAME,
}


def asyncpg_internal(query: str) -> bool:
    """asyncpg's own type lookups (and jit toggles) on first use of a type on a connection."""
    return query in _INTROSPECTION or "set_config('jit'" in query


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def rows_for(history: list[dict[str, Any]], start: int = 0) -> list[msgs.NewMessage]:
    hashes = chain(history)
    return [
        msgs.NewMessage(
            pos=i,
            hash=hashes[i],
            role=history[i]["role"],
            message=history[i],
            tool_call_id=history[i].get("tool_call_id"),
            tokens=len(str(history[i].get("content") or "")) // 4,
        )
        for i in range(start, len(history))
    ]


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        await sessions.upsert_session(c, tenant=T, session_id=S, agent="default", model="m")
        yield c


HISTORY = [
    {"role": "system", "content": "sys"},
    user("one"),
    {"role": "assistant", "content": "two"},
    user("three"),
    {"role": "assistant", "content": "four"},
]


async def test_insert_then_fetch_messages_in_order(conn: Any) -> None:
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    rows = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert [r["pos"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["message"] for r in rows] == HISTORY
    assert all(r["source"] == "client" and r["superseded_at"] is None for r in rows)


async def test_insert_messages_is_one_statement_whatever_the_count(conn: Any) -> None:
    seen: list[str] = []
    conn.add_query_logger(lambda q: seen.append(q.query))
    history = [user(f"m{i}") for i in range(300)]
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(history))
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=[])
    await asyncio.sleep(0)  # loggers run via call_soon
    assert [q for q in seen if not asyncpg_internal(q)] == [msgs.INSERT_MESSAGES]
    assert await conn.fetchval("SELECT count(*) FROM messages") == 300


async def test_messages_are_scoped_by_tenant(conn: Any) -> None:
    await sessions.upsert_session(conn, tenant="t-b", session_id=S, agent="default", model="m")
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    assert await msgs.fetch_messages(conn, tenant="t-b", session_id=S) == []
    other = await msgs.fetch_window(conn, tenant="t-b", session_id=S, system_count=1, from_pos=0)
    assert other == []


async def test_fetch_window_keeps_system_prefix_and_tail(conn: Any) -> None:
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    rows = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=3)
    assert [r["pos"] for r in rows] == [0, 3, 4]
    assert rows[0]["message"]["role"] == "system"
    full = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=1)
    assert [r["pos"] for r in full] == [0, 1, 2, 3, 4]


async def test_fetch_matched_len_finds_longest_common_prefix(conn: Any) -> None:
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    same = chain(HISTORY)
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=same) == 5
    edited = chain([*HISTORY[:3], user("THREE (edited)"), HISTORY[4]])
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=edited) == 3
    other = chain([{"role": "system", "content": "different"}, *HISTORY[1:]])
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=other) == 0
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=[]) == 0


async def test_supersede_keeps_rows_and_frees_positions(conn: Any) -> None:
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    n = await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=3)
    assert n == 2
    live = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert [r["pos"] for r in live] == [0, 1, 2]
    # the superseded hashes no longer match, so a divergence is planned from pos 3
    hashes = chain(HISTORY)
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=hashes) == 3
    # the freed positions accept a new tail (the live-position index is partial)
    new = [*HISTORY[:3], user("three, again")]
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(new, start=3))
    everything = await msgs.fetch_messages(conn, tenant=T, session_id=S, include_superseded=True)
    assert [(r["pos"], r["superseded_at"] is not None) for r in everything] == [
        (0, False),
        (1, False),
        (2, False),
        (3, True),
        (3, False),
        (4, True),
    ]
    # superseding again only touches live rows
    assert await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=3) == 1


async def test_two_live_rows_at_one_position_are_refused(conn: Any) -> None:
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY[:2]))
    with pytest.raises(asyncpg.UniqueViolationError):
        await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY[:2], 1))


async def test_fetch_messages_pages(conn: Any) -> None:
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    page = await msgs.fetch_messages(conn, tenant=T, session_id=S, limit=2, offset=2)
    assert [r["pos"] for r in page] == [2, 3]


async def test_update_evicted_rewrites_prompt_form_and_marks_rows(conn: Any) -> None:
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    placeholder = {"role": "assistant", "content": "[context-cleared] two"}
    await msgs.update_evicted(conn, tenant=T, session_id=S, updates=[(2, placeholder)])
    await msgs.update_evicted(conn, tenant=T, session_id=S, updates=[])
    rows = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert rows[2]["message"] == placeholder and rows[2]["evicted_at"] is not None
    assert [r["pos"] for r in rows if r["evicted_at"] is not None] == [2]
    window = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=1)
    assert [r["evicted"] for r in window] == [False, False, True, False, False]


async def test_fetch_flags_returns_redacted_tool_results_only(conn: Any) -> None:
    rows = [
        msgs.NewMessage(pos=0, hash="h0", role="tool", message={}, tool_call_id="a"),
        msgs.NewMessage(pos=1, hash="h1", role="tool", message={}, tool_call_id="b", redacted=True),
        msgs.NewMessage(pos=2, hash="h2", role="tool", message={}, tool_call_id="c", redacted=True),
    ]
    await msgs.insert_messages(conn, tenant=T, session_id=S, rows=rows)
    got = await msgs.fetch_flags(conn, tenant=T, session_id=S, tool_call_ids=["a", "b", "z"])
    assert got == frozenset({"b"})
