"""A lease renewal (or an API read) through a paused PgBouncer gives up within its own limit
(``services.leases.renewal_limit``) and gives its connection back at once: the connection,
whose cancelled statement the pause holds, is closed rather than reset, since a reset waits
for that statement as long as the pause lasts, and the renewer, waiting in it, would try no
more before the lease lapsed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from proxy.services.leases import Leases, renewal_limit
from proxy.store import steps
from proxy.store.db import BoundedPool, DatabaseTimeout, Lent, create_pool, pooler_kwargs
from tests.integration.pooler.pgbouncer import PgBouncer, find_pgbouncer, start_pgbouncer
from tests.integration.store.helpers import T

TTL = 0.9  # a renewal's limit is 0.1 s


@pytest.fixture
def bouncer(db_dsn: str) -> Iterator[PgBouncer]:
    binary = find_pgbouncer()
    if binary is None:
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    with start_pgbouncer(binary, db_dsn, pool_size=4) as own:
        yield own


async def test_a_renewal_during_a_pause_gives_up_and_its_connection_back_in_its_limit(
    bouncer: PgBouncer, db_dsn: str
) -> None:
    pool = await create_pool(bouncer.pooled(db_dsn), **pooler_kwargs("transaction"))
    leases = Leases(pool, ttl=TTL, acquire_timeout=5)
    try:
        begin = {"tenant": T, "agent": "a", "model": "m", "ttl": TTL}
        await steps.begin_step(pool, session_id="s", owner=leases.owner, **begin)
        leases.hold((T, "s"))
        await bouncer.console("PAUSE")
        try:
            started = time.monotonic()
            with pytest.raises(DatabaseTimeout):
                async with asyncio.timeout(TTL):  # the whole pause, without the fix
                    await leases.renew()
            took = time.monotonic() - started
        finally:
            await bouncer.console("RESUME")
        assert renewal_limit(TTL) <= took < TTL / 3
        async with asyncio.timeout(5):  # the closed connection replaced: the next round renews
            await leases.renew()
        live = "SELECT lease_expires > clock_timestamp() + interval '0.5 s' FROM sessions"
        assert await pool.fetchval(live)
    finally:
        await leases.aclose()
        await asyncio.wait_for(pool.close(), 5)


async def test_an_api_read_during_a_pause_is_answered_within_its_bound(
    bouncer: PgBouncer, db_dsn: str
) -> None:
    """The session and memory APIs' reads (``BoundedPool``) end at their statement's bound
    during a pause, rather than in their connection's reset when the pause ends."""
    pool = await create_pool(bouncer.pooled(db_dsn), **pooler_kwargs("transaction"))
    try:
        bounded = BoundedPool(pool, 1.0)
        await bounded.fetchval("SELECT 1")
        await bouncer.console("PAUSE")
        try:
            started = time.monotonic()
            with pytest.raises(DatabaseTimeout):
                async with asyncio.timeout(2):  # the whole pause, without the fix
                    await bounded.fetchval("SELECT 1", timeout=0.2)
            took = time.monotonic() - started
        finally:
            await bouncer.console("RESUME")
        assert took < 1, took
        assert await bounded.fetchval("SELECT 2") == 2
    finally:
        await asyncio.wait_for(pool.close(), 5)


async def test_a_lent_connection_whose_statement_ran_out_during_a_pause_is_closed(
    bouncer: PgBouncer, db_dsn: str
) -> None:
    """A compaction's connection (``Lent``) likewise: its block ends at the statement's
    bound, not with the pause."""
    pool = await create_pool(bouncer.pooled(db_dsn), **pooler_kwargs("transaction"))
    try:
        await pool.fetchval("SELECT 1")
        await bouncer.console("PAUSE")
        try:
            started = time.monotonic()
            with pytest.raises(DatabaseTimeout):
                async with asyncio.timeout(2), Lent(pool, 1.0) as lent:
                    await (await lent.take()).fetchval("SELECT 1", timeout=0.2)
            took = time.monotonic() - started
        finally:
            await bouncer.console("RESUME")
        assert took < 1, took
        assert await pool.fetchval("SELECT 2") == 2
    finally:
        await asyncio.wait_for(pool.close(), 5)
