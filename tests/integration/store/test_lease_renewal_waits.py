"""A lease whose row another transaction holds locked past the time to live (an operator's
``SELECT … FOR UPDATE`` left open) is not taken, once the lock goes, by a request of another
replica that queued for the row meanwhile: the renewal skips the locked row in its statement
for every lease (``store.leases.renew_leases``), then waits for that row alone on a
connection of its own, ahead of the later waiter, and renews it first (issue 24: a held lease
is never taken while its holder is alive)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from proxy.services.leases import WAITS_MAX, Leases
from proxy.store import steps
from proxy.store.leases import SessionBusy
from tests.integration.store.helpers import B, T

TTL = 0.9  # renewed every 0.3 s


async def test_a_lease_whose_row_is_held_past_the_ttl_is_renewed_before_a_waiter_takes_it(
    pool: asyncpg.Pool,
) -> None:
    leases = Leases(pool, ttl=TTL, acquire_timeout=5)
    begin = {"tenant": T, "agent": "a", "model": "m", "ttl": TTL}
    for sid in ("held", "free"):
        await steps.begin_step(pool, session_id=sid, owner=leases.owner, **begin)
        leases.hold((T, sid))
    leases.start()
    try:
        async with pool.acquire() as other:
            tx = other.transaction()
            await tx.start()
            try:
                await other.execute("SELECT 1 FROM sessions WHERE id = 'held' FOR UPDATE")
                await asyncio.sleep(TTL + 0.3)  # its lease's expiry has passed meanwhile
                waiter = asyncio.create_task(
                    steps.begin_step(pool, session_id="held", owner=B, **begin)
                )
                await asyncio.sleep(0.3)  # the waiter queues for the row
                assert not waiter.done()
                # the statement renewing every lease skipped the row: the other one lives
                live = "SELECT lease_expires > clock_timestamp() FROM sessions WHERE id = $1"
                assert await pool.fetchval(live, "free")
            finally:
                await tx.commit()
        with pytest.raises(SessionBusy):
            await asyncio.wait_for(waiter, 5)
    finally:
        await leases.aclose()


async def test_a_lock_over_many_rows_takes_at_most_a_few_connections(
    pool: asyncpg.Pool,
) -> None:
    """An operator's lock over every session's row leaves the pool to the requests but for
    ``WAITS_MAX`` renewals waiting; every lease is renewed once the lock goes."""
    leases = Leases(pool, ttl=TTL, acquire_timeout=5)
    begin = {"tenant": T, "agent": "a", "model": "m", "ttl": TTL}
    sids = [f"s{i}" for i in range(WAITS_MAX + 3)]
    for sid in sids:
        await steps.begin_step(pool, session_id=sid, owner=leases.owner, **begin)
        leases.hold((T, sid))
    leases.start()
    try:
        async with pool.acquire() as other, other.transaction():
            await other.execute("SELECT 1 FROM sessions FOR UPDATE")
            await asyncio.sleep(TTL)  # three rounds
            assert len(leases._waits) == WAITS_MAX
        live = "SELECT count(*) FROM sessions WHERE lease_expires > clock_timestamp()"
        async with asyncio.timeout(5):
            while await pool.fetchval(live) < len(sids):
                await asyncio.sleep(0.05)
    finally:
        await leases.aclose()
