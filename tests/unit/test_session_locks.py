"""SessionLocks: one replica's first-come-first-served queue per session."""

from __future__ import annotations

import asyncio

from proxy.services.session_locks import SessionLocks

KEY = ("tenant", "s1")


def test_requests_on_one_session_go_one_at_a_time_in_arrival_order() -> None:
    async def run() -> list[str]:
        locks, log = SessionLocks(), []

        async def request(name: str) -> None:
            await locks.acquire(KEY)
            log.append(f"{name} in")
            await asyncio.sleep(0.01)
            log.append(f"{name} out")
            locks.release(KEY)

        await asyncio.gather(*(request(n) for n in "abc"))
        assert locks.waiting(KEY) == 0  # the entry is gone with its last user
        return log

    assert asyncio.run(run()) == ["a in", "a out", "b in", "b out", "c in", "c out"]


def test_other_sessions_never_wait() -> None:
    async def run() -> None:
        locks = SessionLocks()
        await locks.acquire(KEY)
        await asyncio.wait_for(locks.acquire(("tenant", "s2")), 0.1)

    asyncio.run(run())


def test_a_request_cancelled_while_queued_leaves_the_queue() -> None:
    async def run() -> None:
        locks = SessionLocks()
        await locks.acquire(KEY)
        queued = asyncio.create_task(locks.acquire(KEY))
        await asyncio.sleep(0)
        assert locks.waiting(KEY) == 2
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        assert locks.waiting(KEY) == 1
        locks.release(KEY)
        assert locks.waiting(KEY) == 0
        await asyncio.wait_for(locks.acquire(KEY), 0.1)  # free again

    asyncio.run(run())
