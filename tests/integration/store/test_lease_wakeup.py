"""The ``cascade_lease`` notification (migration 0023) against a real PostgreSQL: a lease freed
while a live waiter queues for it is announced, under the session's hash, at the release's
commit; a release nobody waits for, or only lapsed waiters, announces nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from proxy.services.lease_wakeups import LEASE_CHANNEL, session_hash
from proxy.store import leases
from proxy.store.leases import POLL_MAX_SECONDS
from tests.integration.store.lease_turns import LeaseTurns

T = "t-ä"  # a tenant's name may be any text: the payload hashes its UTF-8
A, B = uuid.UUID(int=1), uuid.UUID(int=2)  # two replicas' lease owners
OP = uuid.UUID(int=9)  # a session operation's
SETTLE = 0.2  # how long a notification that is not coming is waited for


class Heard:
    """The payloads a LISTEN connection of its own receives on ``cascade_lease``."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self._read = 0  # how many of them ``next`` returned
        self._arrived = asyncio.Event()

    def __call__(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        self.payloads.append(str(payload))
        self._arrived.set()

    async def next(self, timeout: float = 2.0) -> str:
        """The first payload ``next`` has not returned yet, waiting ``timeout`` for it."""
        try:
            async with asyncio.timeout(timeout):
                while len(self.payloads) <= self._read:
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            pytest.fail(f"no {LEASE_CHANNEL} notification within {timeout} s")
        self._read += 1
        return self.payloads[self._read - 1]

    async def none(self) -> None:
        await asyncio.sleep(SETTLE)
        assert self.payloads == []


@pytest.fixture
async def heard(db_dsn: str) -> AsyncIterator[Heard]:
    heard = Heard()
    conn = await asyncpg.connect(db_dsn)  # straight to PostgreSQL, as the bus listens
    try:
        await conn.add_listener(LEASE_CHANNEL, heard)
        yield heard
    finally:
        await conn.close()


LEASE = LeaseTurns(T)
begin, busy, release, op_may_run = LEASE.begin, LEASE.busy, LEASE.release, LEASE.op_may_run


async def test_a_stored_step_with_a_waiter_announces_the_session(
    pool: asyncpg.Pool, heard: Heard
) -> None:
    await begin(pool, A)
    assert await busy(pool, B)  # B queues
    await heard.none()  # a waiter joining the queue of a held lease announces nothing
    await release(pool, A)
    assert await heard.next() == session_hash(T, "s")
    await begin(pool, B)  # the announced session is B's to take
    await release(pool, B)
    await asyncio.sleep(SETTLE)
    assert len(heard.payloads) == 1  # nobody waited for B's release


async def test_an_aborted_request_with_a_waiter_announces_the_session(
    pool: asyncpg.Pool, heard: Heard
) -> None:
    """``release_lease``: a request that stores nothing (its client left, the provider
    failed) frees the session the same way."""
    await begin(pool, A)
    assert not await op_may_run(pool, OP)  # a session operation queues
    await leases.release_lease(pool, tenant=T, session_id="s", owner=A)
    assert await heard.next() == session_hash(T, "s")
    assert await op_may_run(pool, OP)


async def test_an_operation_taking_its_turn_announces_the_next_waiter(
    pool: asyncpg.Pool, heard: Heard
) -> None:
    """An operation leaves the queue when its turn comes; the waiter behind it may take the
    lease once the operation's transaction commits, and is told so then."""
    await begin(pool, A)
    assert not await op_may_run(pool, OP)
    assert await busy(pool, B)
    await release(pool, A)
    await heard.next()  # A's release: the operation heads the queue
    async with pool.acquire() as conn, conn.transaction():
        assert await leases.free_for_update(conn, tenant=T, session_id="s", owner=OP)
        await asyncio.sleep(SETTLE)
        assert len(heard.payloads) == 1  # delivered at commit, when B can take it
    assert await heard.next() == session_hash(T, "s")
    await begin(pool, B)


async def test_releases_nobody_waits_for_announce_nothing(pool: asyncpg.Pool, heard: Heard) -> None:
    """Steps on one replica or taking turns on two, aborted requests and operations on a
    free session: no waiter, no notification; nor for a waiter whose place lapsed."""
    for owner in (A, A, B, A):
        await begin(pool, owner)
        await release(pool, owner)
    await begin(pool, B)
    await leases.release_lease(pool, tenant=T, session_id="s", owner=B)
    assert await op_may_run(pool, OP)
    await begin(pool, A)
    assert await busy(pool, B)  # B queues, then stops trying (its replica died)
    await asyncio.sleep(2 * POLL_MAX_SECONDS + 0.05)
    await release(pool, A)
    await heard.none()
