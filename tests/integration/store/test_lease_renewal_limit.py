"""A renewal that hangs (here behind an operator's table lock, which ``SKIP LOCKED`` does not
skip; a dead connection or a paused pooler hang it the same way) gives up within its own
limit, a ninth of the time to live (``services.leases.renewal_limit``), rather than the
pool's statement bound, longer than the time to live: the renewer tries again while the
lease still runs, instead of waiting while another replica could take the session."""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg
import pytest

from proxy.services.leases import Leases, renewal_limit
from proxy.store import steps
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


async def test_a_rounds_wait_for_a_connection_counts_against_its_limit(
    pool: asyncpg.Pool, db_dsn: str
) -> None:
    """A round's limit bounds its wait for a pooled connection and its statement together:
    with every connection held for most of the limit, and the table then locked, the round
    gives up at its limit, not at the wait plus a whole statement's limit (nor a wait of a
    third of the time to live, past which the renewer could not try twice more)."""
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
        assert limit <= took < 1.4 * limit, took
    finally:
        await asyncio.wait_for(small.close(), 5)


async def test_a_round_that_finds_the_pool_busy_gives_up_at_its_limit(
    pool: asyncpg.Pool, db_dsn: str
) -> None:
    small = await create_pool(db_dsn, min_size=1, max_size=1)
    leases = Leases(small, ttl=SLOW_TTL, acquire_timeout=5)
    limit = renewal_limit(SLOW_TTL)
    try:
        await _held(pool, leases, "s")
        async with small.acquire():  # held past the round's limit
            started = time.monotonic()
            with pytest.raises(PoolExhausted):
                async with asyncio.timeout(SLOW_TTL):
                    await leases.renew()
            took = time.monotonic() - started
        assert limit <= took < 1.4 * limit, took
        await leases.renew()  # the pool free again: the round renews
        live = "SELECT lease_expires > clock_timestamp() + interval '3 s' FROM sessions"
        assert await pool.fetchval(live)
    finally:
        await asyncio.wait_for(small.close(), 5)
