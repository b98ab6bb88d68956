"""A renewal that hangs (here behind an operator's table lock, which ``SKIP LOCKED`` does not
skip; a dead connection or a paused pooler hang it the same way) gives up within its own
limit, a ninth of the time to live (``services.leases.renewal_limit``), rather than the
pool's statement bound, longer than the time to live: the renewer tries again while the
lease still runs, instead of waiting while another replica could take the session."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import asyncpg
import pytest

from proxy.services.leases import Leases, renewal_limit
from proxy.store import leases as store_leases, steps
from proxy.store.db import DatabaseTimeout, PoolExhausted, create_pool
from tests.integration.store.helpers import T

TTL = 0.9  # renewed every 0.3 s; a renewal's limit is 0.1 s


async def _held(pool: asyncpg.Pool, leases: Leases, sid: str) -> None:
    begin = {"tenant": T, "agent": "a", "model": "m", "ttl": TTL}
    await steps.begin_step(pool, session_id=sid, owner=leases.owner, **begin)
    leases.hold((T, sid))


async def test_a_renewal_that_hangs_gives_up_within_its_own_limit(pool: asyncpg.Pool) -> None:
    leases = Leases(pool, ttl=TTL, acquire_timeout=5)
    await _held(pool, leases, "s")
    async with pool.acquire() as other, other.transaction():
        await other.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with pytest.raises(DatabaseTimeout):
            async with asyncio.timeout(TTL):  # the pool's own bound would be far longer
                await leases.renew()
        took = time.monotonic() - started
    assert renewal_limit(TTL) <= took < TTL / 3


async def test_the_renewer_tries_again_within_the_ttl_and_renews_once_it_can(
    pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
) -> None:
    """While the lock lasts, every round fails in its limit and is tried again a ninth of
    the time to live later; the first round after the lock goes renews the lease."""
    caplog.set_level(logging.WARNING, logger="cascade.leases")
    leases = Leases(pool, ttl=TTL, acquire_timeout=5)
    await _held(pool, leases, "s")
    leases.start()
    try:
        async with pool.acquire() as other, other.transaction():
            await other.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
            await asyncio.sleep(TTL)
        failed = [r for r in caplog.records if "could not renew" in r.getMessage()]
        assert len(failed) >= 2  # one hung statement would have held the loop the whole time
        live = "SELECT lease_expires > clock_timestamp() + interval '0.5 s' FROM sessions"
        async with asyncio.timeout(2):
            while not await pool.fetchval(live):
                await asyncio.sleep(0.02)
    finally:
        await leases.aclose()


SLOW_TTL = 4.5  # a round's limit is 0.5 s, a third of the ttl 1.5 s


class Spy:
    """A store call that notes the ``timeout`` each call is given, after ``pause`` seconds
    of its own (a statement that uses that much of the round), then runs the real one."""

    def __init__(self, real: Any, pause: float = 0.0) -> None:
        self.real, self.pause, self.timeouts = real, pause, list[float]()

    async def __call__(self, conn: Any, **kwargs: Any) -> Any:
        self.timeouts.append(kwargs["timeout"])
        await asyncio.sleep(self.pause)
        return await self.real(conn, **kwargs)


async def test_a_rounds_wait_for_a_connection_counts_against_its_limit(
    pool: asyncpg.Pool, db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round's limit bounds its wait for a pooled connection and its statement together:
    with the pool's one connection held for most of the limit and the table then locked,
    the statement is given what the wait left (not a whole limit of its own) and the round
    gives up with :class:`DatabaseTimeout` (the renewer's retry, a ninth of the TTL later)."""
    spy = Spy(store_leases.renew_leases)
    monkeypatch.setattr(store_leases, "renew_leases", spy)
    small = await create_pool(db_dsn, min_size=1, max_size=1)
    leases = Leases(small, ttl=SLOW_TTL, acquire_timeout=5)
    limit = renewal_limit(SLOW_TTL)
    try:
        await _held(pool, leases, "s")
        async with pool.acquire() as other, other.transaction():
            await other.execute("LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
            busy = await small.acquire()  # the pool's one connection, held by "a request"
            started = time.monotonic()
            renewal = asyncio.create_task(leases.renew())
            await asyncio.sleep(0.7 * limit)
            await small.release(busy)
            with pytest.raises(DatabaseTimeout):
                async with asyncio.timeout(SLOW_TTL):
                    await renewal
            took = time.monotonic() - started
        assert len(spy.timeouts) == 1
        assert spy.timeouts[0] <= 0.6 * limit, spy.timeouts  # 0.3 of it, and the task's start
        assert limit <= took < SLOW_TTL / 3, took
    finally:
        await asyncio.wait_for(small.close(), 5)


async def test_a_rounds_second_statement_gets_what_the_first_left(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases = Leases(pool, ttl=SLOW_TTL, acquire_timeout=5)
    limit = renewal_limit(SLOW_TTL)
    first = Spy(store_leases.renew_leases, pause=0.6 * limit)
    second = Spy(store_leases.renew_claims)
    monkeypatch.setattr(store_leases, "renew_leases", first)
    monkeypatch.setattr(store_leases, "renew_claims", second)
    await _held(pool, leases, "s")
    leases.claim(T, "s", uuid.uuid4())
    await leases.renew()
    assert first.timeouts[0] <= limit
    assert second.timeouts[0] <= 0.4 * limit, second.timeouts  # the sleep alone took 0.6


async def test_a_round_whose_first_statement_used_the_limit_runs_no_second(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases = Leases(pool, ttl=SLOW_TTL, acquire_timeout=5)
    first = Spy(store_leases.renew_leases, pause=1.2 * renewal_limit(SLOW_TTL))
    second = Spy(store_leases.renew_claims)
    monkeypatch.setattr(store_leases, "renew_leases", first)
    monkeypatch.setattr(store_leases, "renew_claims", second)
    await _held(pool, leases, "s")
    leases.claim(T, "s", uuid.uuid4())
    with pytest.raises(DatabaseTimeout, match="ran past its 0.5 s"):
        await leases.renew()
    assert second.timeouts == []


async def test_a_round_that_finds_the_pool_busy_gives_up_at_its_limit(
    pool: asyncpg.Pool, db_dsn: str
) -> None:
    """The wait's bound is the round's limit (its message says it), not the acquire bound of
    a third of the TTL, past which the renewer could not try twice more."""
    small = await create_pool(db_dsn, min_size=1, max_size=1)
    leases = Leases(small, ttl=SLOW_TTL, acquire_timeout=5)
    limit = renewal_limit(SLOW_TTL)
    try:
        await _held(pool, leases, "s")
        async with small.acquire():  # held past the round's limit
            started = time.monotonic()
            with pytest.raises(PoolExhausted, match=f"for {limit:g} s"):
                async with asyncio.timeout(SLOW_TTL):
                    await leases.renew()
            took = time.monotonic() - started
        assert limit <= took < SLOW_TTL / 3, took
        await leases.renew()  # the pool free again: the round renews
        live = "SELECT lease_expires > clock_timestamp() + interval '3 s' FROM sessions"
        assert await pool.fetchval(live)
    finally:
        await asyncio.wait_for(small.close(), 5)
