"""proxy/store/steps.py against a real, migrated PostgreSQL.

record_step stores the reply, the head and the usage in one statement (or the usage alone);
begin_step appends only on the stored head it was told; only a request's last statement waits
for the WAL flush; and the request path's window reads leave out the bodies of rows the client
has just resent.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

from proxy.history import chain
from proxy.store import messages as msgs, raw_outputs, sessions, steps, writes
from tests.integration.store.helpers import (
    HISTORY,
    OWNER,
    S,
    T,
    asyncpg_internal,
    head,
    insert_messages,
    logged,
    rows_for,
    set_head,
    user,
)


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
