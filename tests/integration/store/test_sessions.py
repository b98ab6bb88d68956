"""proxy/store/sessions.py against a real, migrated PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from proxy.cascade.types import Spill
from proxy.store import messages as msgs, raw_outputs, sessions, summaries
from tests.integration.store.helpers import create_session, insert_messages, set_head

T = "t-a"


async def make_session(conn: Any, session_id: str, *, tenant: str = T, n: int = 3) -> None:
    """A session with ``n`` messages, a raw output, a summary and an event."""
    await create_session(conn, tenant=tenant, session_id=session_id, agent="a", model="m")
    rows = [
        msgs.NewMessage(pos=i, hash=f"h{i}", role="user", message={"role": "user", "content": i})
        for i in range(n)
    ]
    await insert_messages(conn, tenant=tenant, session_id=session_id, rows=rows)
    await set_head(
        conn,
        tenant=tenant,
        session_id=session_id,
        head_len=n,
        head_hash=f"h{n - 1}",
        system_count=0,
    )
    spill = Spill(tool_call_id="call_1", text="raw text")
    await msgs.append_and_fetch_window(
        conn,
        tenant=tenant,
        session_id=session_id,
        rows=[],
        raw=raw_outputs.raw_rows([spill], 1000),
        head_len=n,
        head_hash=f"h{n - 1}",
        system_count=0,
        old_len=n,
        from_pos=n,
        move_head=False,
    )
    await summaries.insert_summary(
        conn,
        tenant=tenant,
        session_id=session_id,
        boundary=1,
        boundary_hash="h0",
        content="brief",
        tokens=1,
        model="fast",
    )
    await msgs.persist_step(
        conn, tenant=tenant, session_id=session_id, events=(["context.usage"], [{"x": 1}])
    )


async def counts(conn: Any, session_id: str, tenant: str = T) -> dict[str, int]:
    out = {}
    for table in ("messages", "tool_raw_outputs", "summaries", "events"):
        sql = f"SELECT count(*) FROM {table} WHERE tenant = $1 AND session_id = $2"
        out[table] = await conn.fetchval(sql, tenant, session_id)
    return out


async def test_begin_step_creates_then_touches(pool: asyncpg.Pool) -> None:
    """The request's first statement creates the session, and later updates its agent and
    model without touching its head."""
    async with pool.acquire() as conn:
        begin = {"tenant": T, "session_id": "s"}
        first = (await msgs.begin_step(conn, agent="a", model="m1", **begin)).session
        assert (first["head_len"], first["head_hash"], first["calibration"]) == (0, None, 1.0)
        await set_head(conn, tenant=T, session_id="s", head_len=4, head_hash="x", system_count=1)
        again = (await msgs.begin_step(conn, agent="b", model="m2", **begin)).session
        assert (again["head_len"], again["head_hash"], again["system_count"]) == (4, "x", 1)
        assert (again["agent"], again["model"]) == ("b", "m2")
        when = datetime.fromisoformat
        assert when(again["updated_at"]) >= when(first["updated_at"])
        assert again["created_at"] == first["created_at"]
        await conn.execute("SELECT pg_advisory_unlock_all()")


async def test_fetchrow_session_is_tenant_scoped_and_counts_superseded(
    pool: asyncpg.Pool,
) -> None:
    await make_session(pool, "s")
    assert await sessions.fetchrow_session(pool, tenant="t-b", session_id="s") is None
    assert await sessions.fetchrow_session(pool, tenant=T, session_id="nope") is None
    row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
    assert row is not None and row["superseded_count"] == 0
    await msgs.supersede_from(pool, tenant=T, session_id="s", from_pos=1)
    row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
    assert row is not None and row["superseded_count"] == 2


async def test_fetch_sessions_newest_first_per_tenant(pool: asyncpg.Pool) -> None:
    for sid in ("old", "mid", "new"):
        await create_session(pool, tenant=T, session_id=sid, agent="a", model="m")
    await create_session(pool, tenant="t-b", session_id="theirs", agent="a", model="m")
    rows = await sessions.fetch_sessions(pool, tenant=T)
    assert [r["id"] for r in rows] == ["new", "mid", "old"]
    page = await sessions.fetch_sessions(pool, tenant=T, limit=1, offset=1)
    assert [r["id"] for r in page] == ["mid"]
    assert [r["id"] for r in await sessions.fetch_sessions(pool, tenant="t-b")] == ["theirs"]


async def test_update_usage_and_reclaimed(pool: asyncpg.Pool) -> None:
    await create_session(pool, tenant=T, session_id="s", agent="a", model="m")
    await msgs.record_step(
        pool,
        tenant=T,
        session_id="s",
        reply=None,
        prompt_tokens=900,
        estimate=1000,
        calibration=0.9,
    )
    for tokens, total in ((50, 50), (25, 75), (0, 75)):
        await msgs.persist_step(pool, tenant=T, session_id="s", reclaimed=tokens)
        row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
        assert row is not None and row["reclaimed_tokens"] == total
    row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
    assert row is not None
    assert (row["last_prompt_tokens"], row["last_estimate"], row["calibration"]) == (900, 1000, 0.9)
    assert row["reclaimed_tokens"] == 75
    await msgs.record_step(
        pool,
        tenant=T,
        session_id="s",
        reply=None,
        prompt_tokens=None,
        estimate=10,
        calibration=0.9,
    )
    row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
    assert row is not None and row["last_prompt_tokens"] is None


async def test_reclaimed_tokens_of_a_missing_session_create_nothing(pool: asyncpg.Pool) -> None:
    await msgs.persist_step(pool, tenant=T, session_id="ghost", reclaimed=5)
    assert await sessions.fetchrow_session(pool, tenant=T, session_id="ghost") is None


async def test_delete_cascades_to_everything_the_session_owns(pool: asyncpg.Pool) -> None:
    await make_session(pool, "doomed")
    await make_session(pool, "kept")
    await make_session(pool, "doomed", tenant="t-b")
    assert await sessions.delete_session(pool, tenant=T, session_id="doomed") is True
    assert await sessions.delete_session(pool, tenant=T, session_id="doomed") is False
    assert await counts(pool, "doomed") == dict.fromkeys(
        ("messages", "tool_raw_outputs", "summaries", "events"), 0
    )
    assert await counts(pool, "kept") == {
        "messages": 3,
        "tool_raw_outputs": 1,
        "summaries": 1,
        "events": 1,
    }
    assert (await counts(pool, "doomed", tenant="t-b"))["messages"] == 3


async def test_reset_forgets_history_but_keeps_session_and_events(pool: asyncpg.Pool) -> None:
    await make_session(pool, "s")
    await msgs.record_step(
        pool,
        tenant=T,
        session_id="s",
        reply=None,
        prompt_tokens=5,
        estimate=6,
        calibration=0.5,
    )
    await sessions.reset_session(pool, tenant=T, session_id="s")
    assert await counts(pool, "s") == {
        "messages": 0,
        "tool_raw_outputs": 0,
        "summaries": 0,
        "events": 1,
    }
    row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
    assert row is not None
    assert (row["head_len"], row["head_hash"], row["last_prompt_tokens"]) == (0, None, None)
    assert row["calibration"] == 1.0


async def test_copy_session_makes_an_independent_branch(pool: asyncpg.Pool) -> None:
    await make_session(pool, "parent")
    await msgs.supersede_from(pool, tenant=T, session_id="parent", from_pos=2)
    await sessions.copy_session(pool, tenant=T, source="parent", target="child")
    child = await sessions.fetchrow_session(pool, tenant=T, session_id="child")
    assert child is not None
    assert (child["parent_id"], child["head_len"], child["head_hash"]) == ("parent", 3, "h2")
    # live messages, raw outputs and summaries are copied; superseded rows and events are not
    assert await counts(pool, "child") == {
        "messages": 2,
        "tool_raw_outputs": 1,
        "summaries": 1,
        "events": 0,
    }
    # changing the branch leaves the parent as it was
    await msgs.supersede_from(pool, tenant=T, session_id="child", from_pos=0)
    await sessions.delete_session(pool, tenant=T, session_id="child")
    assert await counts(pool, "parent") == {
        "messages": 3,
        "tool_raw_outputs": 1,
        "summaries": 1,
        "events": 1,
    }
    live = await msgs.fetch_messages(pool, tenant=T, session_id="parent")
    assert len(live) == 2


async def test_copy_session_into_existing_id_fails_whole(pool: asyncpg.Pool) -> None:
    await make_session(pool, "a")
    await make_session(pool, "b", n=1)
    with pytest.raises(asyncpg.UniqueViolationError):
        await sessions.copy_session(pool, tenant=T, source="a", target="b")
    assert (await counts(pool, "b"))["messages"] == 1


UNLOCK_ALL = "SELECT pg_advisory_unlock_all()"


def test_lock_keys_differ_by_tenant_and_session() -> None:
    keys = {sessions.session_lock_key(t, s) for t in ("t-a", "t-b") for s in ("s1", "s2", "s1\x00")}
    assert len(keys) == 6
    assert sessions.session_lock_key("t-a", "s1") == sessions.session_lock_key("t-a", "s1")
    assert all(-(2**63) <= k < 2**63 for k in keys)


async def test_begin_step_serialises_one_session_and_reads_after_the_wait(
    pool: asyncpg.Pool,
) -> None:
    """The lock and the read are one statement, yet the read sees what the holder committed
    while the waiter waited (migration 0003: the function reads with a fresh snapshot)."""
    async with pool.acquire() as a, pool.acquire() as b:
        first = (await msgs.begin_step(a, tenant=T, session_id="s", agent="a", model="m")).session
        assert first["summary_version"] is None and first["head_len"] == 0
        # another session (or tenant) is not blocked
        for tenant, sid in ((T, "other"), ("t-b", "s")):
            await asyncio.wait_for(
                msgs.begin_step(b, tenant=tenant, session_id=sid, agent="a", model="m"), 2
            )
        await b.execute(UNLOCK_ALL)
        # the same session waits until the holder unlocks …
        waiter = asyncio.ensure_future(
            msgs.begin_step(b, tenant=T, session_id="s", agent="a", model="m2")
        )
        await asyncio.sleep(0.2)
        assert not waiter.done()
        # … and then reads a summary committed after it started waiting
        await summaries.insert_summary(
            a,
            tenant=T,
            session_id="s",
            boundary=0,
            boundary_hash=None,
            content="folded",
            tokens=1,
            model="m",
        )
        await msgs.record_step(
            a,
            tenant=T,
            session_id="s",
            reply=None,
            prompt_tokens=7,
            estimate=8,
            calibration=1.0,
            unlock=sessions.session_lock_key(T, "s"),
        )
        row = (await asyncio.wait_for(waiter, 2)).session
        assert (row["summary_version"], row["summary_content"]) == (1, "folded")
        assert (row["last_prompt_tokens"], row["model"]) == (7, "m2")
        await b.execute(UNLOCK_ALL)


async def test_begin_step_writes_the_session_only_to_create_or_change_it(
    pool: asyncpg.Pool,
) -> None:
    """The common request reads its session without writing it (no WAL flush to wait for);
    a new session, or a new agent or model, is written, asynchronously."""
    async with pool.acquire() as c:
        await c.execute("SET synchronous_commit = on")  # the test server runs with it off

        async def opened(model: str) -> tuple[Any, str, int]:
            tx = c.transaction()
            await tx.start()
            try:
                row = (
                    await msgs.begin_step(c, tenant=T, session_id="w", agent="a", model=model)
                ).session
                wrote = await c.fetchval("SELECT pg_current_xact_id_if_assigned() IS NOT NULL")
                mode = await c.fetchval("SHOW synchronous_commit")
            finally:
                await tx.commit()
            await c.execute(UNLOCK_ALL)
            return row, mode, int(wrote)

        row, mode, wrote = await opened("m1")
        assert (row["model"], mode, wrote) == ("m1", "off", 1)
        row, mode, wrote = await opened("m1")
        assert (row["model"], mode, wrote) == ("m1", "on", 0)
        row, mode, wrote = await opened("m2")
        assert (row["model"], mode, wrote) == ("m2", "off", 1)
        await c.execute("RESET synchronous_commit")


async def test_record_step_hands_the_lock_on_only_at_commit(pool: asyncpg.Pool) -> None:
    """The next request must not read the session between the unlock and the commit of the
    step that unlocked it, or it would plan its append on a stale head."""
    key = sessions.session_lock_key(T, "h")
    async with pool.acquire() as a, pool.acquire() as b:
        await msgs.begin_step(a, tenant=T, session_id="h", agent="a", model="m")
        tx = a.transaction()
        await tx.start()
        assert (
            await msgs.record_step(
                a,
                tenant=T,
                session_id="h",
                reply=None,
                prompt_tokens=42,
                estimate=40,
                calibration=1.0,
                unlock=key,
            )
            is True
        )
        waiter = asyncio.ensure_future(
            msgs.begin_step(b, tenant=T, session_id="h", agent="a", model="m")
        )
        await asyncio.sleep(0.2)
        assert not waiter.done()  # unlocked, but not yet committed
        await tx.commit()
        row = (await asyncio.wait_for(waiter, 2)).session
        assert row["last_prompt_tokens"] == 42
        held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = $1"
        assert await b.fetchval(held, a.get_server_pid()) == 0
        await b.execute(UNLOCK_ALL)
