"""A Turn ends once: a second finish, or an abort after a finish, does nothing; either way
the connection goes back, the lease stops being renewed and the queue moves on. A new
session's messages the turn holds back are stored by the step's write, or before the
connection goes back, or before the lease is freed: never lost, never stored twice."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from proxy.services.chaincache import ChainCache
from proxy.services.leases import Leases
from proxy.services.session_locks import SessionLocks
from proxy.services.turn import Turn
from proxy.session_id import SessionKey
from proxy.store import messages as msgs, writes
from proxy.store.db import DatabaseUnavailable, PoolExhausted

KEY = SessionKey("t", "s")


class _Conn:
    def __init__(self) -> None:
        self.statements: list[str] = []

    lost = False  # let go of by asyncpg's pool (it died while held): every call refused

    def _check(self) -> None:
        if self.lost:
            raise asyncpg.InterfaceError("connection has been released back to the pool")

    def is_closed(self) -> bool:
        self._check()
        return False

    async def execute(self, sql: str, *args: Any) -> str:
        self._check()
        self.statements.append(sql)
        return "UPDATE 1"

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        self.statements.append(sql)
        self.args = args
        return []


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


async def _turn(pool: _Pool, locks: SessionLocks, leases: Leases, *, connect: bool = True) -> Turn:
    """A turn at the head of KEY's queue, connected unless ``connect`` is false."""
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
    if connect:
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
    turn = await _turn(pool, locks, leases, connect=False)
    await turn.abort()
    assert pool.lent == 0 and pool.conn.statements == []
    assert locks.waiting(KEY) == 0 and leases.holding() == []


async def test_abort_on_a_lost_connection_frees_the_lease_on_another() -> None:
    """The turn's connection died while it held it (a backend terminated, a pooler
    restarted): the abort gives it back and frees the lease on a fresh one, at once,
    instead of leaving the session locked until the lease expires."""
    pool, locks = _Pool(), SessionLocks()
    leases = _leases(pool)
    turn = await _turn(pool, locks, leases)
    held, pool.conn = pool.conn, _Conn()
    held.lost = True
    await turn.abort()
    assert pool.lent == 2 and pool.released == [held, pool.conn]
    assert held.statements == []
    assert [s.split()[0] for s in pool.conn.statements] == ["UPDATE"]
    assert "lease_owner = NULL" in pool.conn.statements[0]
    assert locks.waiting(KEY) == 0 and leases.holding() == []


HELD = writes.StepWrite(
    rows=[msgs.NewMessage(0, "h0", "user", {"role": "user", "content": "q"})],
    head=(1, "h0", 0),
    events=(["session.message.appended"], [{"count": 1}]),
)


async def test_the_steps_write_takes_the_held_messages() -> None:
    """They go in with the step's marks in one statement; nothing is left to store later."""
    pool, locks = _Pool(), SessionLocks()
    turn = await _turn(pool, locks, _leases(pool))
    turn.hold(HELD)
    await turn.write_step(writes.StepWrite(trimmed=[0], events=(["context.x"], [{}])))
    assert pool.conn.statements == [writes.APPEND]
    move_head, rows = pool.conn.args[2], pool.conn.args[10]
    assert rows[0]["trim"] and move_head
    assert [e["name"] for e in pool.conn.args[14]] == ["session.message.appended", "context.x"]
    await turn.park()
    await turn.abort()
    assert len(pool.conn.statements) == 2  # then the lease's release only
    assert "lease_owner = NULL" in pool.conn.statements[1]


async def test_park_stores_the_held_messages_before_the_connection_goes_back() -> None:
    """Whatever runs while the turn waits (a compaction) reads them from the store."""
    pool, locks = _Pool(), SessionLocks()
    turn = await _turn(pool, locks, _leases(pool))
    turn.hold(HELD)
    await turn.park()
    assert pool.conn.statements == [writes.APPEND] and pool.released == [pool.conn]
    await turn.connect()
    await turn.write_step(writes.StepWrite())  # the step's marks alone: nothing to send
    await turn.park()
    assert pool.conn.statements == [writes.APPEND]


async def test_abort_stores_the_held_messages_then_frees_the_lease() -> None:
    """A refused step (the overflow guard) keeps what the client sent all the same."""
    pool, locks = _Pool(), SessionLocks()
    leases = _leases(pool)
    turn = await _turn(pool, locks, leases)
    turn.hold(HELD)
    await turn.abort()
    assert pool.conn.statements[0] == writes.APPEND
    assert "lease_owner = NULL" in pool.conn.statements[1] and len(pool.conn.statements) == 2
    assert locks.waiting(KEY) == 0 and leases.holding() == []


class _FailingWrite(_Conn):
    """The messages' write fails (the statement is refused); the lease's release works."""

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        raise RuntimeError("refused")


async def test_a_failed_write_of_the_held_messages_still_frees_the_lease_on_abort() -> None:
    """The abort's store is best effort: the client resends the messages, the lease goes."""
    pool, locks = _Pool(), SessionLocks()
    pool.conn = _FailingWrite()
    leases = _leases(pool)
    turn = await _turn(pool, locks, leases)
    turn.hold(HELD)
    await turn.abort()
    assert len(pool.conn.statements) == 1 and "lease_owner = NULL" in pool.conn.statements[0]
    assert locks.waiting(KEY) == 0 and leases.holding() == []


async def test_a_failed_step_write_reaches_its_caller() -> None:
    """The step's write and ``flush`` raise: the request fails rather than answer from a step
    that is not stored."""
    pool, locks = _Pool(), SessionLocks()
    pool.conn = _FailingWrite()
    turn = await _turn(pool, locks, _leases(pool))
    turn.hold(HELD)
    with pytest.raises(RuntimeError):
        await turn.write_step(writes.StepWrite())
    with pytest.raises(RuntimeError):
        await turn.flush()  # still held: the failed write did not take them
    await turn.abort()


@pytest.mark.parametrize("error", [DatabaseUnavailable, PoolExhausted])
async def test_a_reply_the_database_outage_keeps_from_storing_is_one_warning(
    error: type[Exception], caplog: pytest.LogCaptureFixture
) -> None:
    # Regression: logged at ERROR with asyncpg's traceback through the pool, where README
    # has the database going away said in one line with its cause, no traceback; a pool
    # whose every connection stays busy is the 503 server_busy's WARNING elsewhere.
    pool, locks = _Pool(), SessionLocks()

    async def unreachable() -> Any:
        raise error("cannot connect to PostgreSQL at postgresql://u:***@h/db")

    pool.acquire = unreachable  # type: ignore[method-assign]
    turn = await _turn(pool, locks, _leases(pool), connect=False)
    turn.step = object()  # type: ignore[assignment]  # a prepared step: its reply to store
    with caplog.at_level("WARNING", logger="cascade.chat"):
        await turn.finish({"role": "assistant", "content": "x"}, 10)
    [record] = caplog.records
    assert (record.levelname, record.exc_info) == ("WARNING", None)
    assert record.getMessage() == (
        "could not record the reply of session s: cannot connect to PostgreSQL at"
        " postgresql://u:***@h/db"
    )
    assert locks.waiting(KEY) == 0  # the session still goes to the next request
