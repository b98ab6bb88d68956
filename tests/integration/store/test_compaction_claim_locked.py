"""A compaction claim that can come later (a background compaction's, the start's closing of
interrupted ones) does not wait for a session row another transaction holds locked: it is a
claim not taken, at once (``store.leases.claim_compaction``, ``skip_locked``), where it held
a pooled connection, or the replica's start, for the statement bound (30 s). A waiting claim
(a hard or forced compaction) still waits for the row, and takes the claim once it goes."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import asyncpg

from proxy.services import interrupted
from proxy.store import leases
from tests.integration.store.helpers import A, B, T, make_session
from tests.integration.store.test_interrupted_sweep import (
    _Bus,
    _left_by_an_older_version,
    _unpaired,
)

TTL = 5.0


async def test_a_claim_that_can_come_later_skips_a_locked_row(pool: asyncpg.Pool) -> None:
    await make_session(pool, "c")
    claim = {"tenant": T, "session_id": "c", "ttl": TTL}
    async with pool.acquire() as other:
        tx = other.transaction()
        await tx.start()
        await other.execute("SELECT 1 FROM sessions WHERE id = 'c' FOR UPDATE")
        started = time.monotonic()
        async with asyncio.timeout(2):  # waiting for the lock, it would not return
            for background in (True, False):
                skipped = await leases.claim_compaction(
                    pool, owner=A, **claim, background=background, skip_locked=True
                )
                assert not skipped
        assert time.monotonic() - started < 1
        waiting = asyncio.create_task(leases.claim_compaction(pool, owner=B, **claim))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # a waiting claim waits for the row
        await tx.rollback()
    assert await asyncio.wait_for(waiting, 5)
    owner = "SELECT compaction_owner FROM sessions WHERE id = 'c'"
    assert await pool.fetchval(owner) == B
    assert not await leases.claim_compaction(pool, owner=A, **claim, skip_locked=True)
    await leases.release_compaction(pool, tenant=T, session_id="c", owner=B)
    assert await leases.claim_compaction(pool, owner=A, **claim, skip_locked=True)
    assert not await leases.claim_compaction(
        pool, owner=A, tenant=T, session_id="none", ttl=1, skip_locked=True
    )


async def test_a_claim_is_free_only_when_its_row_alone_stood_in_the_way(
    pool: asyncpg.Pool,
) -> None:
    """``claim_free`` tells a locked row (worth trying again) from another compaction's
    claim, a failure's backoff (for a background claim only) and a missing session."""
    await make_session(pool, "f")
    key = {"tenant": T, "session_id": "f"}
    assert await leases.claim_free(pool, **key, background=True)
    assert await leases.claim_compaction(pool, owner=A, **key, ttl=TTL)
    for background in (True, False):
        assert not await leases.claim_free(pool, **key, background=background)
    await leases.release_compaction(pool, **key, owner=A, backoff=60)
    assert not await leases.claim_free(pool, **key, background=True)
    assert await leases.claim_free(pool, **key)  # a hard or forced claim ends a backoff
    assert not await leases.claim_free(pool, tenant=T, session_id="none", background=True)


async def test_a_start_does_not_wait_for_a_locked_session_to_close_its_compaction(
    pool: asyncpg.Pool,
) -> None:
    """The start's sweep of interrupted compactions leaves a session whose row is locked to
    its background sweep, which closes it once the lock goes; the start goes on at once."""
    await _left_by_an_older_version(pool)
    lease_settings: Any = SimpleNamespace(ttl=0.3)
    closer = interrupted.Closer(pool, _Bus(), lease_settings, acquire_timeout=1.0)  # type: ignore[arg-type]
    try:
        async with pool.acquire() as other:
            tx = other.transaction()
            await tx.start()
            await other.execute("SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE")
            started = time.monotonic()
            async with asyncio.timeout(2):  # waiting for the lock, it would not return
                assert await closer.at_start() == 0
            assert time.monotonic() - started < 1
            await tx.rollback()
        async with asyncio.timeout(5):
            while await _unpaired(pool, every=True):
                await asyncio.sleep(0.05)
    finally:
        await closer.aclose()


async def test_the_background_sweep_outlasts_a_lock_longer_than_its_tries(
    pool: asyncpg.Pool,
) -> None:
    """A row locked for longer than the sweep's tries for a held claim (three times the time
    to live) is still swept once the lock goes: a lock has no bound as a lapsing claim has,
    so a try that finds the claim free but the row locked does not count (as a pass that
    finds no database does not), where the sweep gave it up and the older unpaired event
    stayed open until the next start."""
    await _left_by_an_older_version(pool)
    lease_settings: Any = SimpleNamespace(ttl=0.03)  # nine tries take 0.09 s
    closer = interrupted.Closer(pool, _Bus(), lease_settings, acquire_timeout=1.0)  # type: ignore[arg-type]
    try:
        async with pool.acquire() as other:
            tx = other.transaction()
            await tx.start()
            await other.execute("SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE")
            assert await closer.at_start() == 0
            await asyncio.sleep(0.5)  # well past nine tries
            await tx.rollback()
        async with asyncio.timeout(5):
            while await _unpaired(pool, every=True):
                await asyncio.sleep(0.05)
    finally:
        await closer.aclose()
