"""proxy/store/leases.py against a real, migrated PostgreSQL: the session lease a request's
first statement takes and its last one hands on, expiry and renewal across replicas, the
compaction claim, and the session API's wait for a held lease."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from proxy.store import leases, messages as msgs, sessions, steps, summaries
from proxy.store.leases import SessionBusy
from tests.integration.store.helpers import A, B, T, counts, make_session

LEASE = (
    "SELECT lease_owner, lease_expires > clock_timestamp() FROM sessions"
    " WHERE tenant = 't-a' AND id = $1"
)
TTL = 1.0  # seconds: a lease or claim its dead replica no longer renews; long enough that the
# next statement finds it still held on a slow machine, short enough to wait out
TAKEN = 10.0  # seconds past TTL by which another owner's tries have taken the expired one


async def _taken_after_expiry(take: Callable[[], Awaitable[bool]]) -> None:
    """Try ``take`` until it succeeds, as a waiting replica does: the expiry ends the wait,
    however slowly the machine gets there."""
    deadline = time.monotonic() + TTL + TAKEN
    while not await take():
        assert time.monotonic() < deadline, "the expired lease or claim was never taken"
        await asyncio.sleep(0.02)


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
    await steps.begin_step(pool, tenant=T, session_id="x", agent="a", model="m", owner=A, ttl=TTL)
    with pytest.raises(SessionBusy):
        await steps.begin_step(pool, tenant=T, session_id="x", agent="a", model="m", owner=B)

    async def b_begins() -> bool:
        try:
            await steps.begin_step(pool, tenant=T, session_id="x", agent="a", model="m", owner=B)
        except SessionBusy:
            return False
        return True

    await _taken_after_expiry(b_begins)
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


async def test_renewal_skips_a_row_another_transaction_holds(pool: asyncpg.Pool) -> None:
    """A session row locked elsewhere (an operator's open ``FOR UPDATE``) keeps its own lease
    and claim from renewal this round, not the others': the statements return at once."""
    for sid in ("locked", "free"):
        await steps.begin_step(pool, tenant=T, session_id=sid, agent="a", model="m", owner=A)
        assert await leases.claim_compaction(pool, owner=A, tenant=T, session_id=sid, ttl=TTL)
    both = [(T, "locked"), (T, "free")]
    expiry = "SELECT lease_expires, compaction_expires FROM sessions WHERE id = $1"
    before = {sid: tuple(await pool.fetchrow(expiry, sid)) for sid in ("locked", "free")}
    async with pool.acquire() as other, other.transaction():
        await other.execute("SELECT 1 FROM sessions WHERE id = 'locked' FOR UPDATE")
        async with asyncio.timeout(5):  # waiting for the lock, they would not return
            await leases.renew_leases(pool, keys=both, owner=A, ttl=60)
            await leases.renew_claims(pool, claims=[(*k, A) for k in both], ttl=60)
    after = {sid: tuple(await pool.fetchrow(expiry, sid)) for sid in ("locked", "free")}
    assert after["locked"] == before["locked"]
    assert all(a > b for a, b in zip(after["free"], before["free"], strict=True))


async def test_the_compaction_claim_is_one_per_session(pool: asyncpg.Pool) -> None:
    await make_session(pool, "c")
    claim = {"tenant": T, "session_id": "c", "ttl": TTL}
    assert await leases.claim_compaction(pool, owner=A, **claim)
    assert not await leases.claim_compaction(pool, owner=B, **claim)
    await leases.renew_claims(pool, claims=[(T, "c", A)], ttl=TTL)
    # A's replica died: its claim expires; B's, a live replica's, outlasts the test
    held = {**claim, "ttl": 60}
    await _taken_after_expiry(lambda: leases.claim_compaction(pool, owner=B, **held))
    await leases.release_compaction(pool, tenant=T, session_id="c", owner=A)  # not A's any more
    assert not await leases.claim_compaction(pool, owner=A, **claim)
    await leases.release_compaction(pool, tenant=T, session_id="c", owner=B)
    assert await leases.claim_compaction(pool, owner=A, **claim)
    assert not await leases.claim_compaction(pool, owner=A, tenant=T, session_id="none", ttl=1)


async def test_a_failed_compactions_backoff_holds_off_only_background_claims(
    pool: asyncpg.Pool,
) -> None:
    await make_session(pool, "b")
    claim = {"tenant": T, "session_id": "b", "ttl": TTL}
    assert await leases.claim_compaction(pool, owner=A, **claim, background=True)
    await leases.release_compaction(pool, tenant=T, session_id="b", owner=A, backoff=60)
    assert not await leases.claim_compaction(pool, owner=B, **claim, background=True)
    assert await leases.claim_compaction(pool, owner=B, **claim)  # hard, overflow, forced
    await leases.release_compaction(pool, tenant=T, session_id="b", owner=B)  # a success
    assert await leases.claim_compaction(pool, owner=A, **claim, background=True)
    await leases.release_compaction(pool, tenant=T, session_id="b", owner=A, backoff=0.05)
    await asyncio.sleep(0.1)
    assert await leases.claim_compaction(pool, owner=B, **claim, background=True)


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
    await asyncio.wait_for(reset, 10)  # bounds a slow machine, not the wait (the poll does)
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
        row = (await asyncio.wait_for(waiter, 10)).session  # a bound, not a speed
        assert row["last_prompt_tokens"] == 42
