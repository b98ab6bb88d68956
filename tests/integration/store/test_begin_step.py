"""``cascade_begin_step_v7`` (migrations 0020, 0021 and 0028): on a hit, the lease and the
head move are one update of the sessions row, the caller still sees the head as it was
before the request, and a row another transaction replaces while the step waits on its lock
is tested afresh. Its scalars, and ``cascade_append_v2``'s, are typed arguments; the
previous versions, which take them as json, stay callable for a replica still on the
previous code."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from proxy.history import chain
from proxy.store import messages as msgs, sessions, steps, writes
from tests.integration.store.helpers import (
    HISTORY,
    create_session,
    insert_messages,
    rows_for,
    set_head,
    user,
)

T, S = "t-a", "s1"
OWNER = uuid.UUID(int=1)
HISTORY_7 = [*HISTORY, user("five"), {"role": "assistant", "content": "six"}]
HASHES = chain(HISTORY_7)

XACT_WRITES = """
SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'sessions'
"""


@pytest.fixture
async def conn(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as c:
        await create_session(c, tenant=T, session_id=S, agent="default", model="m")
        await insert_messages(c, tenant=T, session_id=S, rows=rows_for(HISTORY_7[:5]))
        yield c


def step(**over: Any) -> dict[str, Any]:
    """An extending request on the five stored messages: two new ones, two system rows."""
    return {
        "owner": OWNER,
        "tenant": T,
        "session_id": S,
        "agent": "default",
        "model": "m",
        "rows": rows_for(HISTORY_7, start=5),
        "head_len": 7,
        "head_hash": HASHES[-1],
        "system_count": 2,
        **over,
    }


async def stored_head(conn: Any) -> tuple[int, str | None, int]:
    row = await sessions.fetchrow_session(conn, tenant=T, session_id=S)
    return row["head_len"], row["head_hash"], row["system_count"]


async def test_an_extending_step_updates_the_sessions_row_once(conn: Any) -> None:
    """Every update writes a row version and its WAL: the lease and the head move share one."""
    await set_head(conn, tenant=T, session_id=S, head_len=5, head_hash=HASHES[4], system_count=1)
    before = await sessions.fetchrow_session(conn, tenant=T, session_id=S)
    async with conn.transaction():
        updated = await conn.fetchval(XACT_WRITES)
        begun = await steps.begin_step(conn, guess=(5, HASHES[4]), **step())
        assert await conn.fetchval(XACT_WRITES) - updated == 1
    assert begun.window is not None
    row = begun.session  # its head from before this request, the rest as the step leaves it
    assert (row["head_len"], row["head_hash"]) == (5, HASHES[4])
    assert row["lease_owner"] == str(OWNER)
    assert await stored_head(conn) == (7, HASHES[-1], 2)
    after = await sessions.fetchrow_session(conn, tenant=T, session_id=S)
    assert after["updated_at"] > before["updated_at"]
    assert len(await msgs.fetch_messages(conn, tenant=T, session_id=S)) == 7


async def test_a_new_model_is_recorded_with_the_head_move(conn: Any) -> None:
    await set_head(conn, tenant=T, session_id=S, head_len=5, head_hash=HASHES[4], system_count=1)
    begun = await steps.begin_step(conn, guess=(5, HASHES[4]), **step(model="m2"))
    assert begun.window is not None and begun.session["model"] == "m2"
    assert begun.session["head_len"] == 5
    row = await sessions.fetchrow_session(conn, tenant=T, session_id=S)
    assert (row["model"], row["head_len"]) == ("m2", 7)


async def test_a_stale_guess_takes_the_lease_and_leaves_the_head(conn: Any) -> None:
    await set_head(conn, tenant=T, session_id=S, head_len=5, head_hash=HASHES[4], system_count=1)
    async with conn.transaction():
        updated = await conn.fetchval(XACT_WRITES)
        begun = await steps.begin_step(conn, guess=(4, HASHES[3]), **step())
        assert await conn.fetchval(XACT_WRITES) - updated == 1
    assert begun.window is None and begun.session["head_len"] == 5
    assert await stored_head(conn) == (5, HASHES[4], 1)
    assert len(await msgs.fetch_messages(conn, tenant=T, session_id=S)) == 5


async def test_a_row_replaced_while_the_step_waits_is_read_afresh(
    conn: Any, pool: asyncpg.Pool
) -> None:
    """The previous step's last statement is in flight when this one begins: the step's
    snapshot sees the head before it, it waits on the row's lock, then matches its guess
    against the row that statement committed (a hit here), never the one it first read."""
    await set_head(conn, tenant=T, session_id=S, head_len=4, head_hash=HASHES[3], system_count=1)
    async with pool.acquire() as other:
        tx = other.transaction()
        await tx.start()
        await other.execute(
            "UPDATE sessions SET head_len = 5, head_hash = $3 WHERE tenant = $1 AND id = $2",
            T,
            S,
            HASHES[4],
        )
        task = asyncio.create_task(steps.begin_step(conn, guess=(5, HASHES[4]), **step()))
        for _ in range(500):
            # Any backend of this test's database waiting on a lock: the step's (behind a
            # pooler, the client's backend pid is not the one that runs the statement). Read
            # outside ``other``'s transaction, which would keep its first snapshot of it.
            waiting = await pool.fetchval(
                "SELECT count(*) > 0 FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting:
                break
            await asyncio.sleep(0.01)
        assert waiting, "the step did not wait on the row's lock"
        await tx.commit()
        begun = await task
    assert begun.window is not None
    assert begun.session["head_len"] == 5
    assert await stored_head(conn) == (7, HASHES[-1], 2)
    assert len(await msgs.fetch_messages(conn, tenant=T, session_id=S)) == 7


async def test_the_step_functions_take_typed_scalars(conn: Any) -> None:
    """Migration 0021: the statements the store sends name the typed versions, which parse no
    json key (each ``json_to_record`` was a statement and a JSON parse per request)."""
    assert "cascade_begin_step_v7(" in steps.BEGIN_STEP
    assert "cascade_append_v2(" in writes.APPEND
    for name in ("cascade_begin_step_v7", "cascade_begin_step_v6", "cascade_append_v2"):
        source = await conn.fetchval("SELECT pg_get_functiondef($1::regproc)", name)
        assert "json_to_record(" not in source and "cascade_append_v1" not in source


async def test_the_previous_versions_still_store_a_step(conn: Any) -> None:
    """A replica still on the previous code during a rolling deploy calls v5 (which calls
    ``cascade_append_v1``) and ``cascade_append_v1`` with their json keys: both still work."""
    await set_head(conn, tenant=T, session_id=S, head_len=5, head_hash=HASHES[4], system_count=1)
    key = {
        "tenant": T,
        "id": S,
        "agent": "default",
        "model": "m",
        "owner": str(OWNER),
        "start": 5,
        "start_hash": HASHES[4],
        "head_len": 6,
        "head_hash": HASHES[5],
        "system_count": 1,
        "ttl": 15.0,
    }
    rows = rows_for(HISTORY_7[:6], start=5)
    records = await conn.fetch(
        "SELECT * FROM cascade_begin_step_v5($1, $2, $3, $4, $5)",
        key,
        msgs.row_objects(rows),
        [r.message for r in rows],
        None,
        None,
    )
    assert records[0]["session"]["appended"] and [r["pos"] for r in records[1:]] == [0, 1, 2, 3, 4]
    assert await stored_head(conn) == (6, HASHES[5], 1)
    step = dict(tenant=T, id=S, move_head=True, head_len=7, head_hash=HASHES[6], system_count=1)
    step.update({"reclaimed": 0, "start": None, "from": None, "notify": None})
    rows = rows_for(HISTORY_7, start=6)
    await conn.fetch(
        "SELECT * FROM cascade_append_v1($1, $2, $3, $4, $5, $6)",
        step,
        msgs.row_objects(rows),
        [r.message for r in rows],
        None,
        None,
        None,
    )
    assert await stored_head(conn) == (7, HASHES[6], 1)
    assert len(await msgs.fetch_messages(conn, tenant=T, session_id=S)) == 7
