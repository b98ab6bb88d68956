"""proxy/store/sessions.py against a real, migrated PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from proxy.cascade.types import Spill
from proxy.store import leases, messages as msgs, raw_outputs, sessions, steps, summaries, writes
from proxy.store.leases import SessionBusy
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
    await writes.append_and_fetch_window(
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
    await writes.persist_step(
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
        begin = {"tenant": T, "session_id": "s", "owner": A}
        first = (await steps.begin_step(conn, agent="a", model="m1", **begin)).session
        assert (first["head_len"], first["head_hash"], first["calibration"]) == (0, None, 1.0)
        await set_head(conn, tenant=T, session_id="s", head_len=4, head_hash="x", system_count=1)
        again = (await steps.begin_step(conn, agent="b", model="m2", **begin)).session
        assert (again["head_len"], again["head_hash"], again["system_count"]) == (4, "x", 1)
        assert (again["agent"], again["model"]) == ("b", "m2")
        when = datetime.fromisoformat
        assert when(again["updated_at"]) >= when(first["updated_at"])
        assert again["created_at"] == first["created_at"]


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
    await steps.record_step(
        pool,
        tenant=T,
        session_id="s",
        reply=None,
        prompt_tokens=900,
        estimate=1000,
        calibration=0.9,
    )
    for tokens, total in ((50, 50), (25, 75), (0, 75)):
        await writes.persist_step(pool, tenant=T, session_id="s", reclaimed=tokens)
        row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
        assert row is not None and row["reclaimed_tokens"] == total
    row = await sessions.fetchrow_session(pool, tenant=T, session_id="s")
    assert row is not None
    assert (row["last_prompt_tokens"], row["last_estimate"], row["calibration"]) == (900, 1000, 0.9)
    assert row["reclaimed_tokens"] == 75
    await steps.record_step(
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
    await writes.persist_step(pool, tenant=T, session_id="ghost", reclaimed=5)
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
    await steps.record_step(
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


A, B = uuid.UUID(int=1), uuid.UUID(int=2)  # two requests' lease owners (two replicas)
LEASE = (
    "SELECT lease_owner, lease_expires > clock_timestamp() FROM sessions"
    " WHERE tenant = 't-a' AND id = $1"
)


async def test_begin_step_takes_the_lease_and_a_held_one_is_busy(pool: asyncpg.Pool) -> None:
    """The lease and the read are one statement; another owner's begin writes nothing and
    says busy, holding nothing; once the holder's last statement released it, the next
    begin takes it and reads what that statement committed (a fresh snapshot per statement,
    migration 0015)."""
    first = await steps.begin_step(pool, tenant=T, session_id="s", agent="a", model="m", owner=A)
    assert first.session["summary_version"] is None and first.session["head_len"] == 0
    assert tuple(await pool.fetchrow(LEASE, "s")) == (A, True)
    # another session (or tenant) is free
    for tenant, sid in ((T, "other"), ("t-b", "s")):
        await steps.begin_step(pool, tenant=tenant, session_id=sid, agent="a", model="m", owner=B)
    with pytest.raises(SessionBusy):
        await steps.begin_step(
            pool, tenant=T, session_id="s", agent="a", model="m2", owner=B, guess=(0, None),
            rows=[msgs.NewMessage(pos=0, hash="h0", role="user", message={"role": "user"})],
            head_len=1, head_hash="h0",
        )  # fmt: skip
    assert (await sessions.fetchrow_session(pool, tenant=T, session_id="s") or {})["model"] == "m"
    assert await pool.fetchval("SELECT count(*) FROM messages WHERE session_id = 's'") == 0
    # the holder's own replica takes it back at once (its queue lets one request through)
    await steps.begin_step(pool, tenant=T, session_id="s", agent="a", model="m", owner=A)
    await summaries.insert_summary(
        pool,
        tenant=T,
        session_id="s",
        boundary=0,
        boundary_hash=None,
        content="folded",
        tokens=1,
        model="m",
    )
    assert await steps.record_step(
        pool,
        tenant=T,
        session_id="s",
        reply=None,
        prompt_tokens=7,
        estimate=8,
        calibration=1.0,
        owner=A,
    )
    assert tuple(await pool.fetchrow(LEASE, "s")) == (None, None)
    row = (
        await steps.begin_step(pool, tenant=T, session_id="s", agent="a", model="m2", owner=B)
    ).session
    assert (row["summary_version"], row["summary_content"]) == (1, "folded")
    assert (row["last_prompt_tokens"], row["model"]) == (7, "m2")


async def test_an_expired_lease_is_taken_and_its_late_holder_stores_nothing(
    pool: asyncpg.Pool,
) -> None:
    """A holder that stopped renewing (its replica died) loses the session once the lease
    expires; should it come back, its last statement stores neither reply nor head."""
    await steps.begin_step(pool, tenant=T, session_id="x", agent="a", model="m", owner=A, ttl=0.3)
    with pytest.raises(SessionBusy):
        await steps.begin_step(pool, tenant=T, session_id="x", agent="a", model="m", owner=B)
    await asyncio.sleep(0.4)
    await steps.begin_step(pool, tenant=T, session_id="x", agent="a", model="m", owner=B)
    reply = msgs.NewMessage(pos=0, hash="h0", role="assistant", message={"role": "assistant"})
    late = {"reply": reply, "prompt_tokens": 1, "estimate": 1, "calibration": 1.0}
    assert not await steps.record_step(pool, tenant=T, session_id="x", owner=A, **late)
    assert await pool.fetchval("SELECT count(*) FROM messages WHERE session_id = 'x'") == 0
    assert tuple(await pool.fetchrow(LEASE, "x")) == (B, True)


async def test_renewal_pushes_only_the_owners_leases(pool: asyncpg.Pool) -> None:
    for sid, owner in (("r1", A), ("r2", B)):
        await steps.begin_step(pool, tenant=T, session_id=sid, agent="a", model="m", owner=owner)
    expiry = "SELECT lease_expires FROM sessions WHERE id = $1"
    before = {sid: await pool.fetchval(expiry, sid) for sid in ("r1", "r2")}
    await leases.renew_leases(pool, keys=[(T, "r1"), (T, "r2")], owner=A, ttl=60)
    assert await pool.fetchval(expiry, "r1") > before["r1"]
    assert await pool.fetchval(expiry, "r2") == before["r2"]
    await leases.release_lease(pool, tenant=T, session_id="r2", owner=A)  # not A's: kept
    assert tuple(await pool.fetchrow(LEASE, "r2")) == (B, True)
    await leases.release_lease(pool, tenant=T, session_id="r2", owner=B)
    assert tuple(await pool.fetchrow(LEASE, "r2")) == (None, None)


async def test_the_compaction_claim_is_one_per_session(pool: asyncpg.Pool) -> None:
    await make_session(pool, "c")
    claim = {"tenant": T, "session_id": "c", "ttl": 0.3}
    assert await leases.claim_compaction(pool, owner=A, **claim)
    assert not await leases.claim_compaction(pool, owner=B, **claim)
    await leases.renew_claims(pool, claims=[(T, "c", A)], ttl=0.3)
    await asyncio.sleep(0.4)  # A's replica died: its claim expires
    assert await leases.claim_compaction(pool, owner=B, **claim)
    await leases.release_compaction(pool, tenant=T, session_id="c", owner=A)  # not A's any more
    assert not await leases.claim_compaction(pool, owner=A, **claim)
    await leases.release_compaction(pool, tenant=T, session_id="c", owner=B)
    assert await leases.claim_compaction(pool, owner=A, **claim)
    assert not await leases.claim_compaction(pool, owner=A, tenant=T, session_id="none", ttl=1)


async def test_reset_waits_for_the_lease_then_holds_the_row(pool: asyncpg.Pool) -> None:
    """The session API's operations wait while a request holds the lease, holding no
    connection, and a request's first statement waits for theirs."""
    await make_session(pool, "busy")
    await steps.begin_step(pool, tenant=T, session_id="busy", agent="a", model="m", owner=A)
    reset = asyncio.ensure_future(sessions.reset_session(pool, tenant=T, session_id="busy"))
    await asyncio.sleep(0.3)
    # It waits between tries, not in one: sampled over half a second, the pool is idle nearly
    # always (a try holds a connection for a few ms; one held across the wait shows in every
    # sample). One sample alone could land inside a try on a slow machine.
    in_use = []
    for _ in range(50):
        in_use.append(pool.get_size() - pool.get_idle_size())
        await asyncio.sleep(0.01)
    assert not reset.done()
    assert in_use.count(0) > len(in_use) // 2, in_use
    await leases.release_lease(pool, tenant=T, session_id="busy", owner=A)
    await asyncio.wait_for(reset, 2)
    assert (await counts(pool, "busy"))["messages"] == 0


async def test_begin_step_writes_the_lease_without_waiting_for_a_flush(
    pool: asyncpg.Pool,
) -> None:
    """Every request writes its lease into the session row (a new row version, no index
    touched), asynchronously: a lost lease is a free session."""
    async with pool.acquire() as c:
        await c.execute("SET synchronous_commit = on")  # the test server runs with it off

        async def opened(model: str) -> tuple[Any, str, int]:
            tx = c.transaction()
            await tx.start()
            try:
                row = (
                    await steps.begin_step(
                        c, tenant=T, session_id="w", agent="a", model=model, owner=A
                    )
                ).session
                wrote = await c.fetchval("SELECT pg_current_xact_id_if_assigned() IS NOT NULL")
                mode = await c.fetchval("SHOW synchronous_commit")
            finally:
                await tx.commit()
            return row, mode, int(wrote)

        row, mode, wrote = await opened("m1")
        assert (row["model"], mode, wrote) == ("m1", "off", 1)
        row, mode, wrote = await opened("m1")
        assert (row["model"], mode, wrote) == ("m1", "off", 1)
        row, mode, wrote = await opened("m2")
        assert (row["model"], mode, wrote) == ("m2", "off", 1)
        await c.execute("RESET synchronous_commit")


async def test_record_step_hands_the_lease_on_only_at_commit(pool: asyncpg.Pool) -> None:
    """The next request must not read the session between the release and the commit of
    the step that released it, or it would plan its append on a stale head: its first
    statement waits for the row."""
    async with pool.acquire() as a, pool.acquire() as b:
        await steps.begin_step(a, tenant=T, session_id="h", agent="a", model="m", owner=A)
        tx = a.transaction()
        await tx.start()
        assert await steps.record_step(
            a,
            tenant=T,
            session_id="h",
            reply=None,
            prompt_tokens=42,
            estimate=40,
            calibration=1.0,
            owner=A,
        )
        waiter = asyncio.ensure_future(
            steps.begin_step(b, tenant=T, session_id="h", agent="a", model="m", owner=B)
        )
        await asyncio.sleep(0.2)
        assert not waiter.done()  # released, but not yet committed
        await tx.commit()
        row = (await asyncio.wait_for(waiter, 2)).session
        assert row["last_prompt_tokens"] == 42
