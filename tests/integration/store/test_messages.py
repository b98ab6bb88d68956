"""proxy/store/messages.py, steps.py and writes.py against a real, migrated PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from typing import Any

import asyncpg
import pytest
from asyncpg import introspection

from proxy.history import chain
from proxy.store import messages as msgs, raw_outputs, sessions, steps, writes
from tests.integration.store.helpers import create_session, insert_messages, set_head

T, S = "t-a", "s1"
_INTROSPECTION = {
    introspection.INTRO_LOOKUP_TYPES,
    introspection.INTRO_LOOKUP_TYPES_13,
    introspection.TYPE_BY_NAME,
}

OWNER = uuid.UUID(int=1)  # one request's lease owner, so a test may begin twice


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
        await create_session(c, tenant=T, session_id=S, agent="default", model="m")
        yield c


HISTORY = [
    {"role": "system", "content": "sys"},
    user("one"),
    {"role": "assistant", "content": "two"},
    user("three"),
    {"role": "assistant", "content": "four"},
]


async def test_insert_then_fetch_messages_in_order(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    rows = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert [r["pos"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["message"] for r in rows] == HISTORY
    assert all(r["source"] == "client" and r["superseded_at"] is None for r in rows)


async def test_messages_are_scoped_by_tenant(conn: Any) -> None:
    await create_session(conn, tenant="t-b", session_id=S, agent="default", model="m")
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    assert await msgs.fetch_messages(conn, tenant="t-b", session_id=S) == []
    other = await msgs.fetch_window(conn, tenant="t-b", session_id=S, system_count=1, from_pos=0)
    assert other == []


async def test_fetch_window_keeps_system_prefix_and_tail(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    rows = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=3)
    assert [r["pos"] for r in rows] == [0, 3, 4]
    assert rows[0]["message"]["role"] == "system"
    full = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=1)
    assert [r["pos"] for r in full] == [0, 1, 2, 3, 4]


async def test_fetch_matched_len_finds_longest_common_prefix(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    same = chain(HISTORY)
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=same) == 5
    edited = chain([*HISTORY[:3], user("THREE (edited)"), HISTORY[4]])
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=edited) == 3
    other = chain([{"role": "system", "content": "different"}, *HISTORY[1:]])
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=other) == 0
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=[]) == 0


async def test_supersede_keeps_rows_and_frees_positions(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    n = await msgs.supersede_from(conn, tenant=T, session_id=S, from_pos=3)
    assert n == 2
    live = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert [r["pos"] for r in live] == [0, 1, 2]
    # the superseded hashes no longer match, so a divergence is planned from pos 3
    hashes = chain(HISTORY)
    assert await msgs.fetch_matched_len(conn, tenant=T, session_id=S, hashes=hashes) == 3
    # the freed positions accept a new tail (the live-position index is partial)
    new = [*HISTORY[:3], user("three, again")]
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(new, start=3))
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
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY[:2]))
    with pytest.raises(asyncpg.UniqueViolationError):
        await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY[:2], 1))


async def test_fetch_messages_pages(conn: Any) -> None:
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    page = await msgs.fetch_messages(conn, tenant=T, session_id=S, limit=2, offset=2)
    assert [r["pos"] for r in page] == [2, 3]


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


async def test_the_message_column_keeps_key_order_and_unknown_fields(conn: Any) -> None:
    # json, not jsonb: jsonb would sort the keys ("content" first) on the way back
    odd = {"role": "tool", "tool_call_id": "c1", "zeta": {"b": 1, "a": [2, 1]}, "content": "x"}
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for([user("q"), odd]))
    raw = await conn.fetchval(
        "SELECT message::text FROM messages WHERE tenant = $1 AND session_id = $2 AND pos = 1",
        T,
        S,
    )
    assert list(json.loads(raw)) == ["role", "tool_call_id", "zeta", "content"]
    for rows in (
        await msgs.fetch_messages(conn, tenant=T, session_id=S),
        await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=0, from_pos=0),
    ):
        got = rows[1]["message"]
        assert got == odd and list(got) == list(odd) and list(got["zeta"]) == ["b", "a"]


# --------------------------------------------------------------------- one-statement writes


async def head(conn: Any, session: str = S) -> tuple[int, str | None, int]:
    row = await sessions.fetchrow_session(conn, tenant=T, session_id=session)
    return row["head_len"], row["head_hash"], row["system_count"]


def logged(conn: Any) -> list[str]:
    seen: list[str] = []
    conn.add_query_logger(lambda q: seen.append(q.query))
    return seen


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


async def test_record_step_stores_reply_head_and_usage_in_one_statement(conn: Any) -> None:
    hashes = chain(HISTORY)
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY[:4]))
    await set_head(conn, tenant=T, session_id=S, head_len=4, head_hash=hashes[3], system_count=1)
    await writes.persist_step(conn, tenant=T, session_id=S, reclaimed=12)
    reply = msgs.NewMessage(
        pos=4, hash=hashes[4], role="assistant", message=HISTORY[4], tokens=9, source="upstream"
    )
    owner = uuid.uuid4()
    await conn.execute(
        "UPDATE sessions SET lease_owner = $3, lease_expires = now() + interval '1 minute'"
        " WHERE tenant = $1 AND id = $2",
        T,
        S,
        owner,
    )
    seen = logged(conn)
    stored = await steps.record_step(
        conn,
        tenant=T,
        session_id=S,
        reply=reply,
        prompt_tokens=321,
        estimate=300,
        calibration=1.07,
        owner=owner,
    )
    await asyncio.sleep(0)
    assert [q for q in seen if not asyncpg_internal(q)] == [steps.RECORD_STEP]
    assert stored is True
    lease = "SELECT lease_owner, lease_expires FROM sessions WHERE tenant = $1 AND id = $2"
    assert tuple(await conn.fetchrow(lease, T, S)) == (None, None)
    rows = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert (rows[4]["message"], rows[4]["tokens"], rows[4]["source"]) == (HISTORY[4], 9, "upstream")
    assert await head(conn) == (5, hashes[4], 1)
    row = await sessions.fetchrow_session(conn, tenant=T, session_id=S)
    assert (row["last_prompt_tokens"], row["last_estimate"], row["calibration"]) == (321, 300, 1.07)


async def test_record_step_without_a_reply_records_usage_only(conn: Any) -> None:
    hashes = chain(HISTORY)
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(HISTORY))
    await set_head(conn, tenant=T, session_id=S, head_len=5, head_hash=hashes[-1], system_count=1)
    stored = await steps.record_step(
        conn,
        tenant=T,
        session_id=S,
        reply=None,
        prompt_tokens=None,
        estimate=40,
        calibration=0.9,
    )
    assert stored is True  # no lease named: stored whatever holds it
    assert len(await msgs.fetch_messages(conn, tenant=T, session_id=S)) == 5
    assert await head(conn) == (5, hashes[-1], 1)
    row = await sessions.fetchrow_session(conn, tenant=T, session_id=S)
    assert (row["last_prompt_tokens"], row["last_estimate"], row["calibration"]) == (None, 40, 0.9)


async def _commit_mode(conn: Any, run: Any) -> str:
    """``synchronous_commit`` as ``run``'s statement leaves it for its own commit: run inside a
    transaction (a ``set_config(..., true)`` lasts until that transaction ends), then read."""
    tx = conn.transaction()
    await tx.start()
    try:
        await run()
        return str(await conn.fetchval("SHOW synchronous_commit"))
    finally:
        await tx.rollback()


async def test_only_the_last_statement_of_a_request_waits_for_the_wal_flush(conn: Any) -> None:
    """append (the client's messages, which it resends) commits asynchronously; record_step
    (the reply) synchronously, which also flushes every earlier commit of the request."""
    hashes = chain(HISTORY)
    await conn.execute("SET synchronous_commit = on")  # the test server runs with it off

    async def append() -> None:
        await writes.append_and_fetch_window(
            conn,
            tenant=T,
            session_id=S,
            rows=rows_for(HISTORY),
            raw=[],
            head_len=5,
            head_hash=hashes[-1],
            system_count=1,
            old_len=0,
            from_pos=1,
        )

    async def record() -> None:
        await steps.record_step(
            conn, tenant=T, session_id=S, reply=None, prompt_tokens=1, estimate=1, calibration=1.0
        )

    async def begin() -> None:  # the same append, in the statement that takes the lock
        begun = await steps.begin_step(
            conn,
            tenant=T,
            session_id=S,
            agent="default",
            model="m",
            owner=OWNER,
            guess=(0, None),
            rows=rows_for(HISTORY),
            head_len=5,
            head_hash=hashes[-1],
            system_count=1,
        )
        assert begun.window == []

    assert await _commit_mode(conn, append) == "off"
    assert await _commit_mode(conn, begin) == "off"
    assert await _commit_mode(conn, record) == "on"
    # outside a transaction the setting was local to the statement's own commit
    await append()
    assert await conn.fetchval("SHOW synchronous_commit") == "on"
    assert await head(conn) == (5, hashes[-1], 1)
    await conn.execute("RESET synchronous_commit")


async def test_begin_step_appends_only_on_the_stored_head_it_was_told(conn: Any) -> None:
    """The right guess stores the new rows and reads the older window in the statement that
    takes the lock; a stale one writes nothing and leaves the append to the caller."""
    history = [*HISTORY, user("five"), {"role": "tool", "tool_call_id": "c9", "content": "..."}]
    hashes = chain(history)
    await insert_messages(conn, tenant=T, session_id=S, rows=rows_for(history[:5]))
    await set_head(conn, tenant=T, session_id=S, head_len=5, head_hash=hashes[4], system_count=1)
    step = {
        "owner": OWNER,
        "tenant": T,
        "session_id": S,
        "agent": "default",
        "model": "m",
        "rows": rows_for(history, start=5),
        "raw": [("c9", "the whole output", 16, False)],
        "head_len": 7,
        "head_hash": hashes[-1],
        "system_count": 1,
        "events": (["session.message.appended"], [{"from_pos": 5}]),
    }
    events_before = await conn.fetchval("SELECT count(*) FROM events")

    stale = await steps.begin_step(conn, guess=(4, hashes[3]), **step)
    assert stale.window is None and stale.session["head_len"] == 5
    assert len(await msgs.fetch_messages(conn, tenant=T, session_id=S)) == 5
    assert await conn.fetchval("SELECT count(*) FROM events") == events_before

    seen = logged(conn)
    begun = await steps.begin_step(conn, guess=(5, hashes[4]), **step)
    await asyncio.sleep(0)
    assert [q for q in seen if not asyncpg_internal(q)] == [steps.BEGIN_STEP]
    assert begun.session["head_len"] == 5  # the row as it was before this request
    assert begun.window is not None
    assert [(r["pos"], r["message"]) for r in begun.window] == [
        (0, HISTORY[0]),
        *((i, HISTORY[i]) for i in range(1, 5)),
    ]
    stored = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert [r["message"] for r in stored] == history
    assert await head(conn) == (7, hashes[-1], 1)
    raw = await raw_outputs.fetchrow_raw_output(conn, tenant=T, session_id=S, tool_call_id="c9")
    assert raw is not None and raw["content"] == "the whole output"
    assert await conn.fetchval("SELECT count(*) FROM events") == events_before + 1


async def test_window_reads_leave_out_the_bodies_of_verbatim_rows(conn: Any) -> None:
    """A row stored exactly as the client sent it comes back without its body from the
    request path's window reads (the client has just resent it); other rows, evicted ones
    and the session API's reads keep theirs."""
    history = [*HISTORY, user("five"), user("six")]
    hashes = chain(history)
    rows = rows_for(history[:5])
    # 1 and 3 stand for a redacted message and a stored reply
    rows = [r if r.pos in (1, 3) else replace(r, verbatim=True) for r in rows]
    await insert_messages(conn, tenant=T, session_id=S, rows=rows)
    await set_head(conn, tenant=T, session_id=S, head_len=5, head_hash=hashes[4], system_count=1)
    placeholder = {"role": "user", "content": "[context-cleared] four"}
    await writes.persist_step(conn, tenant=T, session_id=S, evicted=[(4, placeholder, 3)])
    step = {
        "owner": OWNER,
        "tenant": T,
        "session_id": S,
        "agent": "default",
        "model": "m",
        "head_len": 6,
        "head_hash": hashes[5],
        "system_count": 1,
    }

    begun = await steps.begin_step(
        conn, guess=(5, hashes[4]), rows=rows_for(history[:6], 5), **step
    )
    assert begun.window is not None
    read = [(r["pos"], r["message"], r["verbatim"]) for r in begun.window]
    assert read == [
        (0, None, True),
        (1, HISTORY[1], False),
        (2, None, True),
        (3, HISTORY[3], False),
        (4, placeholder, False),
    ]

    appended = await writes.append_and_fetch_window(
        conn,
        tenant=T,
        session_id=S,
        rows=rows_for(history, 6),
        raw=[],
        head_len=7,
        head_hash=hashes[6],
        system_count=1,
        old_len=6,
        from_pos=1,
    )
    assert [r["message"] for r in appended] == [
        None,
        HISTORY[1],
        None,
        HISTORY[3],
        placeholder,
        history[5],
    ]
    full = await msgs.fetch_window(conn, tenant=T, session_id=S, system_count=1, from_pos=1)
    assert [r["message"] for r in full] == [*history[:4], placeholder, *history[5:]]
    listed = await msgs.fetch_messages(conn, tenant=T, session_id=S)
    assert [r["message"] for r in listed] == [*history[:4], placeholder, *history[5:]]


TRICKY = [
    'quotes " and \\ backslashes, {braces}, [brackets], commas, NULL, ""',
    "unicode é 😀 \u2028 and a tab\t and a newline\n",
    "",
]


async def test_json_and_jsonb_travel_whole_in_binary_arrays(conn: Any) -> None:
    # The pool sends json/jsonb in PostgreSQL's binary format (store/db.py), so a json[]
    # parameter carries each element length-prefixed: every character that needed quoting
    # in the text array format must arrive, and come back, unchanged.
    values = [{"role": "user", "content": text, "n": [1, None, True]} for text in TRICKY]
    got = await conn.fetch(
        "SELECT m, m->>'content' AS content, m::jsonb AS b"
        " FROM unnest($1::json[]) WITH ORDINALITY AS t(m, o) ORDER BY o",
        values,
    )
    assert [r["m"] for r in got] == values
    assert [r["b"] for r in got] == values
    assert [r["content"] for r in got] == TRICKY  # parsed by the server, not just echoed
    assert await conn.fetchval("SELECT $1::jsonb -> 'k'", {"k": "é"}) == "é"


def test_a_jsonb_value_of_an_unknown_format_version_is_refused() -> None:
    from proxy.store.db import _decode_jsonb

    assert _decode_jsonb(b'\x01{"a": 1}') == {"a": 1}
    with pytest.raises(ValueError, match="jsonb format version"):
        _decode_jsonb(b'\x02{"a": 1}')


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
    is the newer), and a spill written after it wins again."""

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
    assert await served() == "turn one, whole"  # turn five's row is live: nothing to serve
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
