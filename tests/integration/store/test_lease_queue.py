"""The queue of a session's waiters on other replicas (migration 0022) against a real
PostgreSQL: a free lease goes to the first live waiter, a waiter that stops trying loses its
place after a second, and the queue never lets a held lease be taken."""

from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg

from proxy.store import leases
from proxy.store.leases import POLL_MAX_SECONDS
from tests.integration.store.lease_turns import LeaseTurns

T = "t-a"
A, B, C = (uuid.UUID(int=n) for n in (1, 2, 3))  # three replicas' lease owners
PLACE = 2 * POLL_MAX_SECONDS  # how long a waiter's place lasts after its last try
QUEUE = "SELECT lease_queue FROM sessions WHERE tenant = 't-a' AND id = $1"
LEASE = LeaseTurns(T)
TURNS = 3  # each racer's turns in the session before the race ends
STARVED = 30.0  # seconds: a racer still short of its turns by then was starved
begin, busy, release, op_may_run = LEASE.begin, LEASE.busy, LEASE.release, LEASE.op_may_run


async def test_a_free_lease_goes_to_the_waiter_not_to_the_holders_next_request(
    pool: asyncpg.Pool,
) -> None:
    """Replica A's back-to-back requests no longer take the lease back the moment it is
    free: B, which tried while A held it, is next."""
    await begin(pool, A)
    assert await busy(pool, B)  # B waits: its place in the queue is taken
    await release(pool, A)
    assert await busy(pool, A)  # A's next request: B is ahead
    await begin(pool, B)
    assert await pool.fetchval(QUEUE, "s") == [A]  # B left the queue; A waits behind it
    await release(pool, B)
    await begin(pool, A)
    assert await pool.fetchval(QUEUE, "s") is None  # nobody waits: nothing more to read


async def test_waiters_on_several_replicas_take_the_lease_in_arrival_order(
    pool: asyncpg.Pool,
) -> None:
    await begin(pool, A)
    assert await busy(pool, B)
    assert await busy(pool, C)
    await release(pool, A)
    assert await busy(pool, C)  # C tries first once the lease is free, but B came first
    assert await busy(pool, A)
    await begin(pool, B)
    await release(pool, B)
    assert await busy(pool, A)  # C, then A
    await begin(pool, C)
    await release(pool, C)
    await begin(pool, A)


async def test_the_queue_never_lets_a_held_lease_be_taken(pool: asyncpg.Pool) -> None:
    """The first waiter is refused while the lease is held, by a request or an operation,
    and the holder's own replica takes its lease back at once, as without the queue."""
    await begin(pool, A)
    op = uuid.UUID(int=9)
    for _ in range(3):
        assert await busy(pool, B)
        assert not await op_may_run(pool, op)
    await begin(pool, A)  # the holder's own lease, waiters or not
    assert await pool.fetchval(QUEUE, "s") == [B, op]
    await release(pool, A)
    assert not await op_may_run(pool, op)  # B is ahead of it
    await begin(pool, B)
    assert not await op_may_run(pool, op)  # held by B
    await release(pool, B)
    assert await op_may_run(pool, op)  # its turn: it leaves the queue
    assert await pool.fetchval(QUEUE, "s") is None


async def test_one_holder_at_a_time_whoever_waits(pool: asyncpg.Pool) -> None:
    """Four owners, each a replica's request in a loop, and a session operation: never two
    in the session at once, and every one of them gets in, again and again, while all the
    others keep asking. They run until each has had ``TURNS`` turns, not for a fixed time,
    so that a slow machine makes the test slower, not wrong; ``STARVED`` bounds the wait."""
    inside: list[str] = []
    overlaps: list[list[str]] = []
    names = [f"replica {n}" for n in range(4)] + ["operation"]
    turns = dict.fromkeys(names, 0)
    everyone_in = asyncio.Event()

    async def hold(name: str) -> None:
        inside.append(name)
        if len(inside) > 1:
            overlaps.append(list(inside))
        turns[name] += 1
        await asyncio.sleep(0.005)
        inside.remove(name)
        if min(turns.values()) >= TURNS:
            everyone_in.set()

    async def replica(n: int) -> None:
        owner = uuid.UUID(int=100 + n)
        while not everyone_in.is_set():
            delays = leases.poll_delays()
            while await busy(pool, owner, "race"):
                await asyncio.sleep(next(delays))
            await hold(f"replica {n}")
            await release(pool, owner, "race")

    async def operation() -> None:
        owner = uuid.uuid4()
        while not everyone_in.is_set():
            delays = leases.poll_delays()
            while True:
                async with pool.acquire() as conn, conn.transaction():
                    if await leases.free_for_update(conn, tenant=T, session_id="race", owner=owner):
                        await hold("operation")  # inside its transaction, the row locked
                        break
                await asyncio.sleep(next(delays))

    await begin(pool, A, "race")
    await release(pool, A, "race")
    racers = asyncio.gather(*(replica(n) for n in range(4)), operation())
    try:
        await asyncio.wait_for(racers, STARVED)  # cancels the racers when it times out
    except TimeoutError:
        raise AssertionError(f"someone starved: {turns}") from None
    assert overlaps == []
    assert min(turns.values()) >= TURNS, turns


async def test_a_dead_waiters_place_lapses_after_a_second(pool: asyncpg.Pool) -> None:
    """A waiter that stops trying (its replica died, its client left) delays the session at
    most ``PLACE`` after its last try, then the holder's replica takes it again."""
    await begin(pool, A)
    assert await busy(pool, B)
    last_try = time.monotonic()
    await release(pool, A)
    while True:  # B never tries again
        tried = time.monotonic()
        if not await busy(pool, A):
            break
        # B's place was there when this try ran, after it started: a slow statement delays
        # only the try's end
        assert tried - last_try < PLACE + 0.5, "a dead waiter kept the session"
        await asyncio.sleep(0.02)
    waited = time.monotonic() - last_try
    assert waited >= PLACE / 2, waited  # B's place held it back (until it lapsed)
    assert await pool.fetchval(QUEUE, "s") is None  # the lapsed place is gone


async def test_a_dead_operations_place_lapses_too(pool: asyncpg.Pool) -> None:
    await begin(pool, A)
    assert not await op_may_run(pool, uuid.UUID(int=9))
    await release(pool, A)
    assert await busy(pool, A)
    await asyncio.sleep(PLACE + 0.05)
    await begin(pool, A)


async def test_requests_that_do_not_wait_write_no_queue(pool: asyncpg.Pool) -> None:
    """Uncontended steps, on one replica or taking turns on two, leave the queue NULL (the
    one-statement paths require it empty)."""
    for owner in (A, A, B, A):
        await begin(pool, owner, "quiet")
        await release(pool, owner, "quiet")
    assert await pool.fetchval(QUEUE, "quiet") is None


async def test_a_waiter_that_leaves_the_queue_gives_its_place_up_at_once(
    pool: asyncpg.Pool,
) -> None:
    """``leave_queue`` (a session operation whose client left): the waiter behind it takes
    the free lease now, not once the leaver's place lapsed; the others keep their order."""
    await begin(pool, A)
    ops = [uuid.uuid4() for _ in range(3)]
    for op in ops:
        assert not await op_may_run(pool, op)  # each queued in turn
    await leases.leave_queue(pool, tenant=T, session_id="s", owner=ops[1])
    assert await pool.fetchval(QUEUE, "s") == [ops[0], ops[2]]
    await leases.leave_queue(pool, tenant=T, session_id="s", owner=ops[0])
    await release(pool, A)
    assert await op_may_run(pool, ops[2])  # the first one left: no wait for its place
    await leases.leave_queue(pool, tenant=T, session_id="s", owner=ops[2])  # not queued
    assert await pool.fetchval(QUEUE, "s") is None
