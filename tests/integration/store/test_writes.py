"""proxy/store/writes.py against a real, migrated PostgreSQL.

append_and_fetch_window stores a request's rows and reads the older window in one statement;
persist_step stores a step's decisions (evictions, trims, reclaimed tokens, events) in one
statement, or none; an evicted row keeps its body, which read_tool_output pages (unless it was
redacted, or a spilled output is newer); write_step is one statement with or without new rows.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from proxy.history import chain
from proxy.store import messages as msgs, raw_outputs, sessions, writes
from tests.integration.store.helpers import (
    HISTORY,
    S,
    T,
    asyncpg_internal,
    head,
    insert_messages,
    logged,
    rows_for,
    user,
)


async def test_persist_step_rewrites_evicted_prompt_forms_and_marks_rows(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    placeholder = {"role": "assistant", "content": "[context-cleared] two"}
    await writes.persist_step(conn, tenant=T, session_id=S, evicted=[(2, placeholder, 7)])
    await writes.persist_step(conn, tenant=T, session_id=S, evicted=[])
    rows = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert rows[2]["message"] == placeholder and rows[2]["evicted_at"] is not None
    assert [r["pos"] for r in rows if r["evicted_at"] is not None] == [2]
    # the window (what every later step sends) carries the placeholder and its own cost
    window = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=1)
    assert [r["message"] for r in window] == [*HISTORY[:2], placeholder, *HISTORY[3:]]
    assert [r["tokens"] for r in window] == [0, 0, 7, 1, 1]


async def test_persist_step_leaves_superseded_rows_alone(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=2)
    fresh = [*HISTORY[:2], {"role": "assistant", "content": "TWO"}]
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(fresh, start=2))
    placeholder = {"role": "assistant", "content": "[context-cleared] TWO"}
    await writes.persist_step(conn, tenant=T, session_id=S, evicted=[(2, placeholder, 3)])
    rows = await msgs.fetch_messages(conn, tenant=T, session_id=S, include_superseded=True)
    at_two = [
        (r["message"], r["superseded_at"] is None, r["evicted_at"] is None)
        for r in rows
        if r["pos"] == 2
    ]
    assert at_two == [(HISTORY[2], False, True), (placeholder, True, False)]


async def test_append_and_fetch_window_stores_and_reads_in_one_statement(conn: Any) -> None:
    history = [*HISTORY, user("five"), {"role": "tool", "tool_call_id": "c9", "content": "..."}]
    hashes = chain(history)
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(history[:5]))
    seen = logged(conn)
    old = await writes.append_and_fetch_window(
        conn,
        tenant=T,
        session_id=S,
        rows=rows_for(history, start=5),
        raw=[("c9", "the whole output", 16, False)],
        head_len=7,
        head_hash=hashes[-1],
        system_count=1,
        old_len=5,
        from_pos=3,
    )
    await asyncio.sleep(0)  # loggers run via call_soon
    assert [q for q in seen if not asyncpg_internal(q)] == [writes.APPEND]
    # the read sees the window's older rows only: system prefix + positions 3..4
    assert [r["pos"] for r in old] == [0, 3, 4]
    assert [r["message"] for r in old] == [HISTORY[0], *HISTORY[3:]]
    # … and the write stored the new rows, the raw output and the head
    stored = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert [r["message"] for r in stored] == history
    assert await head(conn) == (7, hashes[-1], 1)
    raw = await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c9")
    assert raw is not None and raw["content"] == "the whole output"
    # the next request's read: the older rows, which the raw output stored beside one of
    # them does not change
    again = await writes.append_and_fetch_window(
        conn,
        tenant=T,
        session_id=S,
        rows=[],
        raw=[],
        head_len=7,
        head_hash=hashes[-1],
        system_count=1,
        old_len=7,
        from_pos=5,
    )
    assert [r["pos"] for r in again] == [0, 5, 6]
    assert list(again[0].keys()) == [
        "pos",
        "hash",
        "role",
        "message",
        "tool_call_id",
        "tokens",
        "redacted",
        "verbatim",
    ]


async def test_append_and_fetch_window_serves_the_newest_raw_output_keeps_the_old(
    conn: Any,
) -> None:
    first = [("c1", "first", 5, False)]
    await writes.append_and_fetch_window(
        conn,
        tenant=T,
        session_id=S,
        rows=[],
        raw=first,
        head_len=0,
        head_hash=None,
        system_count=0,
        old_len=0,
        from_pos=0,
    )
    await writes.append_and_fetch_window(
        conn,
        tenant=T,
        session_id=S,
        rows=[],
        raw=[("c1", "second", 6, False)],
        head_len=0,
        head_hash=None,
        system_count=0,
        old_len=0,
        from_pos=0,
    )
    raw = await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c1")
    assert raw is not None and raw["content"] == "second"  # the newest (migration 0010)
    kept = await conn.fetch(
        "SELECT content FROM tool_raw_output_versions WHERE tenant = $1"
        " AND session_id = $2 AND tool_call_id = 'c1'",
        T,
        S,
    )
    assert [r["content"] for r in kept] == ["first"]


async def test_persist_step_stores_a_steps_decisions_in_one_statement(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    placeholder = {"role": "assistant", "content": "[context-cleared] two"}
    got: list[str] = []

    def heard(*args: Any) -> None:
        got.append(args[-1])

    await conn.add_listener("cascade_events", heard)
    seen = logged(conn)
    await writes.persist_step(
        conn,
        tenant=T,
        session_id=S,
        evicted=[(2, placeholder, 4)],
        trimmed=[2, 3],
        reclaimed=30,
        events=(["context.evicted"], [{"count": 1}]),
        transient=['{"x": 1}'],
    )
    await asyncio.sleep(0)  # loggers run via call_soon
    assert [q for q in seen if not asyncpg_internal(q)] == [writes.PERSIST_STEP]
    rows = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    marks = [(r["pos"], r["evicted_at"] is not None, r["trimmed_at"] is not None) for r in rows]
    # position 2 was both evicted and trimmed: both changes land, not one of them
    assert marks == [
        (0, False, False),
        (1, False, False),
        (2, True, True),
        (3, False, True),
        (4, False, False),
    ]
    assert rows[2]["message"] == placeholder and rows[3]["message"] == HISTORY[3]
    assert [r["tokens"] for r in rows][2:4] == [4, 1]
    session = await sessions.fetchrow_session(conn, tenant=T, session_id=S)
    assert session is not None and session["reclaimed_tokens"] == 30
    names = await conn.fetch(
        "SELECT name, data FROM events WHERE tenant = $1 AND session_id = $2", T, S
    )
    assert [(r["name"], r["data"]) for r in names] == [("context.evicted", {"count": 1})]
    for _ in range(50):  # notifications arrive asynchronously
        if got:
            break
        await asyncio.sleep(0.02)
    await conn.remove_listener("cascade_events", heard)
    # the transient payload as given (a persisted event is announced only to watched
    # sessions, by migration 0004's trigger)
    assert got == ['{"x": 1}']


async def test_persist_step_with_nothing_to_store_sends_nothing(conn: Any) -> None:
    seen = logged(conn)
    await writes.persist_step(conn, tenant=T, session_id=S, evicted=[], trimmed=[], reclaimed=0)
    await conn.execute("SELECT 1")
    await asyncio.sleep(0)
    assert [q for q in seen if not asyncpg_internal(q)] == ["SELECT 1"]


TOOL_HISTORY = [
    user("look"),
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "content": [{"type": "text", "text": "full "}, {"type": "text", "text": "résultat"}],
    },
    {"role": "assistant", "content": "done"},
]


async def test_an_evicted_row_keeps_its_body_and_read_tool_output_pages_it(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(TOOL_HISTORY))
    placeholder = {"role": "tool", "tool_call_id": "c1", "content": "[context-cleared] f"}
    await writes.persist_step(conn, tenant=T, session_id=S, evicted=[(2, placeholder, 3)])
    stored = await conn.fetchrow(
        "SELECT message, placeholder FROM messages WHERE tenant = $1 AND session_id = $2"
        " AND pos = 2",
        T,
        S,
    )
    assert (stored["message"], stored["placeholder"]) == (TOOL_HISTORY[2], placeholder)
    # every read of the prompt form sees the placeholder
    window = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=0, from_pos=0)
    assert [r["message"] for r in window] == [*TOOL_HISTORY[:2], placeholder, TOOL_HISTORY[3]]
    listed = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert listed[2]["message"] == placeholder
    # read_tool_output's source: the body's text (parts joined as eviction's spill joined
    # them), though nothing was spilled
    assert await conn.fetchval("SELECT count(*) FROM tool_raw_outputs") == 0
    got = await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c1")
    assert got == {"content": "full \nrésultat", "original_bytes": 15, "capped": False}
    # ... still after the client rewrote that part of its history
    await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=1)
    again = await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c1")
    assert again == got
    # a branch copies only the live history, so not this superseded row
    await sessions.copy_session(conn, tenant=T, source=S, target="copy")
    assert (
        await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id="copy", tool_call_id="c1")
        is None
    )


async def test_a_branch_keeps_evicted_bodies_and_placeholders(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(TOOL_HISTORY))
    placeholder = {"role": "tool", "tool_call_id": "c1", "content": "[context-cleared] f"}
    await writes.persist_step(conn, tenant=T, session_id=S, evicted=[(2, placeholder, 3)])
    await sessions.copy_session(conn, tenant=T, source=S, target="copy")
    window = await msgs.fetch_window(conn, tenant=T, session_id="copy", system_count=0, from_pos=0)
    assert window[2]["message"] == placeholder
    got = await raw_outputs.fetchrow_raw_output(
        conn, tenant=T, session_id="copy", tool_call_id="c1"
    )
    assert got is not None and got["content"] == "full \nrésultat"


async def test_a_spilled_output_wins_and_a_redacted_evicted_row_is_never_paged(
    conn: Any,
) -> None:
    rows = rows_for(TOOL_HISTORY)
    rows[2] = replace(rows[2], redacted=True)
    await insert_messages(conn, tenant=T, session_id=S, rows=rows)
    placeholder = {"role": "tool", "tool_call_id": "c1", "content": "[context-cleared] f"}
    await writes.persist_step(conn, tenant=T, session_id=S, evicted=[(2, placeholder, 3)])
    assert (
        await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c1")
        is None
    )
    await writes.append_and_fetch_window(
        conn,
        tenant=T,
        session_id=S,
        rows=[],
        raw=[("c1", "spilled", 7, False)],
        head_len=len(rows),
        head_hash=rows[-1].hash,
        system_count=0,
        old_len=len(rows),
        from_pos=len(rows),
        move_head=False,
    )
    got = await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c1")
    assert got == {"content": "spilled", "original_bytes": 7, "capped": False}


async def test_a_reused_tool_call_id_serves_its_newest_result_spilled_or_evicted(
    conn: Any,
) -> None:
    """A server that numbers its calls ``call_0`` afresh each turn: turn 1's output was cut
    and spilled; turn 5's was whole, and later evicted. The id serves turn 5's text (its row
    is the newer), whole or evicted, and a spill written after it wins again."""

    async def spill(text: str) -> None:
        await writes.append_and_fetch_window(
            conn,
            tenant=T,
            session_id=S,
            rows=[],
            raw=[("c0", text, len(text), False)],
            head_len=0,
            head_hash=None,
            system_count=0,
            old_len=0,
            from_pos=0,
        )

    async def served() -> str:
        raw = await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c0")
        assert raw is not None
        return str(raw["content"])

    await spill("turn one, whole")
    call = {"id": "c0", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    history = [
        user("go"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "content": "turn five"},
    ]
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(history))
    assert await served() == "turn five"  # whole in its message: the newest result
    placeholder = {"role": "tool", "tool_call_id": "c0", "content": "[context-cleared]"}
    await writes.persist_step(conn, tenant=T, session_id=S, evicted=[(2, placeholder, 3)])
    assert await served() == "turn five"
    await spill("turn seven, whole")
    assert await served() == "turn seven, whole"


async def test_write_step_is_one_statement_with_or_without_new_rows(conn: Any) -> None:
    """A new session's rows go in already evicted with the step's marks; a stored session's
    rows are marked in place: one statement each, and nothing when there is nothing."""
    seen: list[str] = []
    conn.add_query_logger(lambda q: seen.append(q.query))
    placeholder = {"role": "assistant", "content": "[context-cleared] two"}
    rows = rows_for(HISTORY)
    head = (len(HISTORY), rows[-1].hash, 1)
    await writes.write_step(
        conn,
        tenant=T,
        session_id=S,
        w=writes.StepWrite(rows=rows, head=head, evicted=[(2, placeholder, 3)], reclaimed=5),
    )
    await writes.write_step(conn, tenant=T, session_id=S, w=writes.StepWrite(trimmed=[1]))
    await writes.write_step(conn, tenant=T, session_id=S, w=writes.StepWrite())
    await asyncio.sleep(0)  # loggers run via call_soon
    assert [q for q in seen if not asyncpg_internal(q)] == [writes.APPEND, writes.PERSIST_STEP]
    stored = await conn.fetch(
        "SELECT pos, placeholder::text, trimmed_at IS NOT NULL AS trimmed FROM messages"
        " WHERE session_id = $1 ORDER BY pos",
        S,
    )
    assert [(r["pos"], r["trimmed"]) for r in stored] == [(i, i == 1) for i in range(5)]
    assert json.loads(stored[2]["placeholder"]) == placeholder
    session = await conn.fetchrow(
        "SELECT head_len, reclaimed_tokens FROM sessions WHERE id = $1", S
    )
    assert tuple(session) == (len(HISTORY), 5)
