"""A Turn ends once: a second finish, or an abort after a finish, does nothing."""

from __future__ import annotations

from typing import Any

from proxy.services.chaincache import ChainCache
from proxy.services.session_locks import SessionLocks
from proxy.services.turn import Turn
from proxy.session_id import SessionKey

KEY = SessionKey("t", "s")


class _Pool:
    def __init__(self) -> None:
        self.released: list[Any] = []

    async def release(self, conn: Any) -> None:
        self.released.append(conn)


async def _turn(pool: _Pool, locks: SessionLocks) -> Turn:
    await locks.acquire(KEY)
    return Turn(
        KEY,
        "conn",
        pool=pool,
        locks=locks,
        chains=ChainCache(),  # type: ignore[arg-type]
        bus=None,
    )  # type: ignore[arg-type]


async def test_finish_then_abort_releases_once() -> None:
    pool, locks = _Pool(), SessionLocks()
    turn = await _turn(pool, locks)
    await turn.finish(None, None)  # no step prepared: nothing to store, only the release
    await turn.finish({"role": "assistant", "content": "x"}, 10)
    await turn.abort()
    assert pool.released == ["conn"] and locks.waiting(KEY) == 0


async def test_abort_gives_the_session_to_the_next_request() -> None:
    pool, locks = _Pool(), SessionLocks()
    turn = await _turn(pool, locks)
    assert locks.waiting(KEY) == 1
    await turn.abort()
    await turn.abort()
    assert pool.released == ["conn"] and locks.waiting(KEY) == 0
