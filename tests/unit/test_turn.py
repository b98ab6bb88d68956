"""A Turn ends once: a second finish, or an abort after a finish, does nothing; either way
the connection goes back, the lease stops being renewed and the queue moves on."""

from __future__ import annotations

from typing import Any

from proxy.services.chaincache import ChainCache
from proxy.services.leases import Leases
from proxy.services.session_locks import SessionLocks
from proxy.services.turn import Turn
from proxy.session_id import SessionKey

KEY = SessionKey("t", "s")


class _Conn:
    def __init__(self) -> None:
        self.statements: list[str] = []

    async def execute(self, sql: str, *args: Any) -> str:
        self.statements.append(sql)
        return "UPDATE 1"


class _Pool:
    def __init__(self) -> None:
        self.conn = _Conn()
        self.lent = 0
        self.released: list[Any] = []

    async def acquire(self) -> Any:
        self.lent += 1
        return self.conn

    async def release(self, conn: Any) -> None:
        self.released.append(conn)


async def _turn(pool: _Pool, locks: SessionLocks, leases: Leases) -> Turn:
    await locks.acquire(KEY)
    turn = Turn(
        KEY,
        pool=pool,  # type: ignore[arg-type]
        locks=locks,
        leases=leases,
        chains=ChainCache(),
        bus=None,  # type: ignore[arg-type]
        acquire_timeout=1.0,
    )
    await turn.connect()
    return turn


def _leases(pool: _Pool) -> Leases:
    return Leases(pool, ttl=15.0, acquire_timeout=1.0)  # type: ignore[arg-type]


async def test_finish_then_abort_releases_once() -> None:
    pool, locks = _Pool(), SessionLocks()
    leases = _leases(pool)
    turn = await _turn(pool, locks, leases)
    assert leases.holding() == [KEY]
    await turn.finish(None, None)  # no step prepared: nothing to store, only the release
    await turn.finish({"role": "assistant", "content": "x"}, 10)
    await turn.abort()
    assert pool.released == [pool.conn] and locks.waiting(KEY) == 0
    assert leases.holding() == []


async def test_abort_frees_the_lease_and_gives_the_session_to_the_next_request() -> None:
    pool, locks = _Pool(), SessionLocks()
    leases = _leases(pool)
    turn = await _turn(pool, locks, leases)
    assert locks.waiting(KEY) == 1
    await turn.park()  # the provider call: no connection held
    assert pool.released == [pool.conn]
    await turn.abort()  # borrows one for the lease's release
    await turn.abort()
    assert pool.lent == 2 and len(pool.released) == 2
    assert [s.split()[0] for s in pool.conn.statements] == ["UPDATE"]
    assert "lease_owner = NULL" in pool.conn.statements[0]
    assert locks.waiting(KEY) == 0 and leases.holding() == []


async def test_a_turn_that_never_had_a_connection_aborts_without_a_statement() -> None:
    """The pool was exhausted before its first statement: no lease can be held, so the
    abort asks for no second connection (the 503 is not delayed by another wait)."""
    pool, locks = _Pool(), SessionLocks()
    leases = _leases(pool)
    await locks.acquire(KEY)
    turn = Turn(
        KEY,
        pool=pool,  # type: ignore[arg-type]
        locks=locks,
        leases=leases,
        chains=ChainCache(),
        bus=None,  # type: ignore[arg-type]
        acquire_timeout=1.0,
    )
    await turn.abort()
    assert pool.lent == 0 and pool.conn.statements == []
    assert locks.waiting(KEY) == 0 and leases.holding() == []
