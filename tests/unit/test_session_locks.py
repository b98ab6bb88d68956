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


# -- lanes of a derived session (issue 21, item 5) ---------------------------------------

BASE = ("tenant", "auto-abc")


def _lane(n: int) -> tuple[str, str]:
    return ("tenant", "auto-abc" if n == 1 else f"auto-abc.{n}")


def test_a_free_derived_session_is_its_own_lane() -> None:
    assert SessionLocks().lane(BASE, ["h1"], lambda key: None) == BASE


def test_a_busy_derived_session_sends_each_request_to_the_next_free_lane() -> None:
    async def run() -> list[tuple[str, str]]:
        locks, taken = SessionLocks(), []
        for _ in range(4):
            key = locks.lane(BASE, ["h1"], lambda key: None)
            await asyncio.wait_for(locks.acquire(key), 0.1)  # never waits
            taken.append(key)
        locks.release(_lane(2))
        taken.append(locks.lane(BASE, ["h1"], lambda key: None))  # the freed one again
        return taken

    assert asyncio.run(run()) == [_lane(1), _lane(2), _lane(3), _lane(4), _lane(2)]


def test_a_conversation_returns_to_the_lane_whose_head_its_history_continues() -> None:
    heads = {_lane(1): (2, "a2"), _lane(2): (2, "b2"), _lane(3): (1, "x1")}
    locks = SessionLocks()
    assert locks.lane(BASE, ["b1", "b2", "b3"], heads.get) == _lane(2)
    assert locks.lane(BASE, ["a1", "a2", "a3"], heads.get) == _lane(1)
    # continues no lane: the first free one, not the first unknown one
    assert locks.lane(BASE, ["c1"], heads.get) == _lane(1)
    # a head longer than the history is no prefix of it
    assert locks.lane(BASE, ["b1"], {_lane(1): (2, "b2")}.get) == _lane(1)


def test_a_conversations_next_turn_waits_for_its_busy_lane_and_nothing_else_does() -> None:
    async def run() -> None:
        locks = SessionLocks()
        await locks.acquire(_lane(1), sent=(2, "a2"))  # still storing the reply to a1, a2
        # its next turn (a1, a2, the reply, a question) waits behind it, in its lane
        assert locks.lane(BASE, ["a1", "a2", "r3", "a4"], lambda key: None) == _lane(1)
        # the same history again (a batch, a retry) and another conversation never wait
        assert locks.lane(BASE, ["a1", "a2"], lambda key: None) == _lane(2)
        assert locks.lane(BASE, ["a1", "b2", "b3"], lambda key: None) == _lane(2)
        locks.release(_lane(1))
        await locks.acquire(_lane(1))  # held by a session operation: no history of its own
        assert locks.lane(BASE, ["a1", "a2", "r3", "a4"], lambda key: None) == _lane(2)

    asyncio.run(run())


def test_a_conversations_next_turn_waits_for_a_session_operation_on_its_lane() -> None:
    """A forced compaction takes the session's turn for a moment once the request in flight
    stored its reply: the conversation's next turn, sent meanwhile, continues that lane's
    stored head and waits for it there rather than splitting onto another lane."""

    async def run() -> None:
        locks, heads = SessionLocks(), {_lane(1): (3, "r3")}
        async with locks.turn(_lane(1)):  # a compact (or reset, branch) holds the lane
            assert locks.lane(BASE, ["a1", "a2", "r3", "a4"], heads.get) == _lane(1)
            # another conversation, or an unknown head, never waits for it
            assert locks.lane(BASE, ["b1", "b2"], heads.get) == _lane(2)
            assert locks.lane(BASE, ["a1", "a2", "r3", "a4"], lambda key: None) == _lane(2)

    asyncio.run(run())
