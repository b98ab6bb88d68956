"""Issue 21, fault 1 in the store: the text columns and jsonb strings that refuse a NUL take
the client's (or the fast model's) text through ``proxy.store.nul`` and give it back."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
import pytest

from proxy.jsonio import dumps
from proxy.store import events, messages as msgs, nul, sessions, steps, summaries, writes
from tests.integration.store.test_summaries import S, T, store, summarise

OWNER = uuid.UUID(int=1)


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        await steps.begin_step(c, tenant=T, session_id=S, agent="default", model="m", owner=OWNER)
        yield c


async def test_a_summary_with_nul_round_trips(conn: Any) -> None:
    await store(
        conn,
        [
            {"role": "system", "content": "sys"},
            *({"role": "user", "content": f"m{i}"} for i in range(6)),
        ],
    )
    assert await summarise(conn, 4, "## Goal\nread \x00 bytes \uffff") == 1
    latest = await summaries.fetchrow_latest(conn, tenant=T, session_id=S)
    assert latest is not None and latest["content"] == "## Goal\nread \x00 bytes \uffff"
    [row] = await summaries.fetch_summaries(conn, tenant=T, session_id=S)
    assert row["content"] == latest["content"]


async def test_an_event_with_nul_strings_round_trips(conn: Any) -> None:
    data = {"tool_call_id": "call\x00x", "ids": ["a\x00", "b"], "k\x00": 1, "n": None}
    event_id = await events.insert_event(conn, tenant=T, session_id=S, name="context.x", data=data)
    [row] = await events.fetch_events_after(conn, tenant=T, session_id=S, after_id=event_id - 1)
    assert nul.decode_json(row["data"]) == data


async def test_a_model_name_with_nul_round_trips(conn: Any) -> None:
    await steps.begin_step(
        conn, tenant=T, session_id=S, agent="default", model="m\x00odel", owner=OWNER
    )
    row = await sessions.fetchrow_session(conn, tenant=T, session_id=S)
    assert row is not None and row["model"] == "m\x00odel"
    [listed] = await sessions.fetch_sessions(conn, tenant=T)
    assert listed["model"] == "m\x00odel"


async def test_a_step_with_nul_reaches_every_table_as_sent(conn: Any) -> None:
    """``cascade_begin_step_v6`` takes its rows, raw outputs and events inside json
    documents: a body keeps its bytes (key order, ``\\u0000``) and the escaped texts and event
    strings come back as they were."""
    message = {"role": "tool", "z": "a\x00b", "content": "\uffffx \u2028", "a": [1, {"y": 0}]}
    event = {"tool_call_id": "c\x00", "k\x00": ["v\x00"]}
    begun = await steps.begin_step(
        conn,
        tenant=T,
        session_id=S,
        agent="default",
        model="m",
        owner=OWNER,
        guess=(0, None),
        rows=[msgs.NewMessage(0, "h0", "tool", message, tool_call_id="c\x00", tokens=3)],
        raw=[(nul.encode("c\x00"), nul.encode("out\x00put"), 7, True)],
        head_len=1,
        head_hash="h0",
        events=(["context.a", "context.b"], [event, {"n": 2}]),
    )
    assert begun.window == []
    stored = await conn.fetchrow(
        "SELECT message::text AS body, role, tool_call_id, tokens FROM messages"
        " WHERE tenant = $1 AND session_id = $2",
        T,
        S,
    )
    assert stored["body"] == dumps(message).decode()
    assert (nul.decode(stored["tool_call_id"]), stored["role"], stored["tokens"]) == (
        "c\x00",
        "tool",
        3,
    )
    raw = await conn.fetchrow(
        "SELECT tool_call_id, content, original_bytes, capped FROM tool_raw_outputs"
    )
    assert (nul.decode(raw[0]), nul.decode(raw[1]), raw[2], raw[3]) == (
        "c\x00",
        "out\x00put",
        7,
        True,
    )
    rows = await conn.fetch("SELECT name, data FROM events WHERE session_id = $1 ORDER BY id", S)
    assert [(r["name"], nul.decode_json(r["data"])) for r in rows] == [
        ("context.a", event),
        ("context.b", {"n": 2}),
    ]


async def test_a_new_sessions_step_with_nul_reaches_every_table_as_sent(conn: Any) -> None:
    """``cascade_append_v2`` with everything a new session's first step stores: a row goes in
    already evicted, its placeholder beside the body in a json[] like the bodies, so both keep
    their ``\\u0000``; the transient payload (JSON text, its NUL an escape) reaches listeners
    as sent (the persisted event is announced only to a replica watching the session)."""
    message = {"role": "tool", "z": "a\x00b", "content": "out\x00put"}
    placeholder = {"role": "tool", "content": "[evicted \x00]"}
    payload = json.dumps({"t": T, "s": S, "n": "context.evicted", "d": {"id": "c\x00"}})
    heard: asyncio.Queue[str] = asyncio.Queue()

    def listen(*args: Any) -> None:
        heard.put_nowait(args[3])

    await conn.add_listener(events.NOTIFY_CHANNEL, listen)
    rows = [
        msgs.NewMessage(0, "h0", "user", {"role": "user", "content": "q\x00"}, verbatim=True),
        msgs.NewMessage(1, "h1", "tool", message, tool_call_id="c\x00", tokens=9, verbatim=True),
    ]
    await writes.write_step(
        conn,
        tenant=T,
        session_id=S,
        w=writes.StepWrite(
            rows=rows,
            raw=[(nul.encode("c\x00"), nul.encode("out\x00put"), 7, False)],
            head=(2, "h1", 0),
            evicted=[(1, placeholder, 3)],
            trimmed=[0],
            reclaimed=6,
            events=(["context.a"], [{"k\x00": "v\x00"}]),
            transient=[payload],
        ),
    )
    stored = await conn.fetch(
        "SELECT message::text AS body, placeholder::text AS ph, tool_call_id, tokens, verbatim,"
        " evicted_at IS NOT NULL AS evicted, trimmed_at IS NOT NULL AS trimmed FROM messages"
        " WHERE tenant = $1 AND session_id = $2 ORDER BY pos",
        T,
        S,
    )
    assert [r["body"] for r in stored] == [dumps(r.message).decode() for r in rows]
    assert stored[1]["ph"] == dumps(placeholder).decode()
    assert nul.decode(stored[1]["tool_call_id"]) == "c\x00"
    assert [(r["tokens"], r["verbatim"], r["evicted"], r["trimmed"]) for r in stored] == [
        (0, True, False, True),
        (3, False, True, False),
    ]
    session = await conn.fetchrow(
        "SELECT head_len, head_hash, reclaimed_tokens FROM sessions WHERE tenant = $1 AND id = $2",
        T,
        S,
    )
    assert tuple(session) == (2, "h1", 6)
    raw = await conn.fetchval("SELECT content FROM tool_raw_outputs WHERE session_id = $1", S)
    assert nul.decode(raw) == "out\x00put"
    assert await asyncio.wait_for(heard.get(), 5) == payload
    await conn.remove_listener(events.NOTIFY_CHANNEL, listen)
    [event] = await events.fetch_events_after(conn, tenant=T, session_id=S, after_id=0)
    assert (event["name"], nul.decode_json(event["data"])) == ("context.a", {"k\x00": "v\x00"})
