"""Connections and the pool: opening them, the codecs, and a lost database or an unanswered
statement raised as its 503 rather than a failed statement's error (what each failure is:
``db_errors.py``, whose names this re-exports; opening one connection, and its name:
``db_connect.py``, likewise); the migration runner is ``migrations.py``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
from pgvector.asyncpg import register_vector

from proxy.jsonio import dumps, loads
from proxy.store.db_connect import APPLICATION_NAME, connect, named
from proxy.store.db_errors import (
    SLOW,
    DatabaseTimeout,
    DatabaseUnavailable,
    PoolerMismatch,
    PoolExhausted,
    TlsRefused,
    UnreadableUrl,
    connection_lost,
    lost,
    timed_out,
    unavailable_when_lost,
)
from proxy.store.dsn import redact_dsn
from proxy.store.outage import Outage
from proxy.store.pooler import Pooler, pooler_kwargs

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

__all__ = [
    "APPLICATION_NAME",
    "named",
    "create_pool",
    "DatabaseUnavailable",
    "DatabaseTimeout",
    "PoolerMismatch",
    "connect",
    "redact_dsn",
    "UnreadableUrl",
    "PoolExhausted",
    "acquire",
    "borrowed",
    "Lent",
    "BoundedPool",
    "lend",
    "Connection",
    "Executor",
    "connection_lost",
    "GuardedConnection",
    "unavailable_when_lost",
    "Pooler",
    "pooler_kwargs",
    "TlsRefused",
]

Connection: TypeAlias = "asyncpg.Connection | PoolConnectionProxy"
"""One connection: a bare one, or one the pool lends (what :func:`acquire` returns)."""
Executor: TypeAlias = "asyncpg.Pool | BoundedPool | Connection"
"""What runs a statement: the pool (which lends a connection for it) or one connection."""


CANCEL_GRACE = 2.0
"""Seconds a connection whose statement was cancelled (its time ran out, or its task was
cancelled: a client gone) waits for the server's answer to the cancel before its next
statement (a transaction's ROLLBACK) or its return to the pool; then it is closed. asyncpg
would wait as long as the pool's statement bound again, and a paused pooler holds that
answer as long as the pause lasts: a connection and its task held long after the statement
gave up. A healthy server answers a cancel within a round trip or two. The grace bounds that
wait alone (:func:`_settle`): the next statement has its own time, as on any connection."""


async def _settle(conn: GuardedConnection) -> None:
    """Wait for the answer to ``conn``'s cancelled statement (:func:`_guarded` bounds it by
    :data:`CANCEL_GRACE`) through an empty query: asyncpg waits for that answer before it
    sends any statement and has no public call that waits for it alone. One more round trip,
    after a cancel outside a transaction only: in one, the cancel failed it, and PostgreSQL
    refuses to bind any statement there but its ROLLBACK. Fetched: ``execute`` reads a
    command tag, which an empty query has not."""
    await asyncpg.Connection.fetch(conn, "")


def _guarded(method: Callable[..., Coroutine[Any, Any, Any]]) -> Any:
    """``method`` of asyncpg's Connection, raising :class:`DatabaseUnavailable` when the
    connection was lost under it, or the server is out of resources (SQLSTATE class 53: a
    full disk, out of memory, too many connections), which no fault of the request's or the
    proxy's causes and a retry may get past (typed as the method it wraps, overloads
    included)."""

    @functools.wraps(method)
    async def guarded(self: GuardedConnection, *args: Any, **kwargs: Any) -> Any:
        grace: asyncio.Timeout | None = None
        try:
            if self.cancel_unsettled and self.is_in_transaction():  # failed: its ROLLBACK next
                async with asyncio.timeout(CANCEL_GRACE) as grace:
                    result = await method(self, *args, **kwargs)
            else:
                if self.cancel_unsettled:  # the grace bounds the cancel's answer alone
                    async with asyncio.timeout(CANCEL_GRACE) as grace:
                        await _settle(self)
                    self.cancel_unsettled = False
                result = await method(self, *args, **kwargs)
            self.cancel_unsettled = False
            return result
        except asyncio.CancelledError:
            self.cancel_unsettled = True
            raise
        except Exception as exc:
            if grace is not None and grace.expired():
                self.terminate()
                raise DatabaseTimeout(
                    f"the database did not answer a cancelled statement's cancel within"
                    f" {CANCEL_GRACE:g} s (a paused pooler?); its connection was closed"
                ) from exc
            self.cancel_unsettled = isinstance(exc, TimeoutError)
            if connection_lost(exc, self):
                raise lost(exc) from exc
            if isinstance(exc, SLOW):
                bound = kwargs.get("timeout") or self.command_timeout
                raise timed_out(exc, bound) from exc
            if isinstance(exc, asyncpg.InsufficientResourcesError):
                raise DatabaseUnavailable(
                    f"PostgreSQL is out of resources: {type(exc).__name__}: {exc}", exc.sqlstate
                ) from exc
            PoolerMismatch.raise_from(exc)
            raise

    return guarded


class GuardedConnection(asyncpg.Connection):
    """The pool's connection class: a statement on a connection that died under it (a
    server restart, ``pg_terminate_backend``, a reset socket), in whatever statement of a
    request, raises :class:`DatabaseUnavailable`, which the API answers with its 503 and
    ``Retry-After``, instead of asyncpg's own error, which it would answer with a 500.

    asyncpg's pool throws a closed connection away at release and opens a new one at the
    next acquire, so the request after one that met a dead connection is served, once the
    replica has read the close of every other one that died with it (a restart kills them
    all; one whose backend has not exited yet still looks open, and a request handed it is
    a 503 too). Every
    statement Cascade runs goes through these five methods (a transaction's BEGIN and
    COMMIT through ``execute``), on a pooled connection or through ``Pool.fetch...``.
    """

    cancel_unsettled = False
    """Whether this connection's last statement was cancelled (its time ran out, or its task
    was) and none ended since: asyncpg then waits for the server's answer to the cancel
    before anything else it does with it, :data:`CANCEL_GRACE` at most here."""

    command_timeout: float | None = None
    """The pool's statement bound (asyncpg's ``command_timeout``), as the pool's connect
    callback was given it (:func:`create_pool`): asyncpg keeps its own copy private."""

    execute = _guarded(asyncpg.Connection.execute)
    executemany = _guarded(asyncpg.Connection.executemany)
    fetch = _guarded(asyncpg.Connection.fetch)
    fetchrow = _guarded(asyncpg.Connection.fetchrow)
    fetchval = _guarded(asyncpg.Connection.fetchval)


async def acquire(pool: asyncpg.Pool, timeout: float) -> PoolConnectionProxy:
    """``pool.acquire()``, waiting at most ``timeout`` seconds; then :class:`PoolExhausted`,
    which the API answers with a 503 and ``Retry-After`` instead of queueing without end."""
    try:
        # Not ``acquire(timeout=)``: on Python 3.11 asyncpg's wait_for runs the acquire in a
        # task of its own, on every request; a timeout scope is one timer handle.
        async with asyncio.timeout(timeout):
            return await pool.acquire()
    except TimeoutError:
        raise PoolExhausted(
            f"all {pool.get_max_size()} database connections stayed held by requests in "
            f"flight for {timeout:g} s; retry shortly, or raise CASCADE_POOL_MAX_SIZE"
        ) from None


@contextlib.asynccontextmanager
async def borrowed(pool: asyncpg.Pool, timeout: float) -> AsyncIterator[PoolConnectionProxy]:
    """A connection from :func:`acquire` for the block, given back after it; a lost one
    raises :class:`DatabaseUnavailable` (:func:`unavailable_when_lost`). One whose statement
    ran out of its time here (asyncpg's timeout, which asks the server to cancel it) is
    closed instead: given back, its reset waits for that cancel to land, as long as a
    pooler's pause or a dead link lasts, and its holder with it."""
    conn = await acquire(pool, timeout)
    try:
        with unavailable_when_lost():
            yield conn
    except DatabaseTimeout as exc:
        _close_if_cancelling(conn, exc)
        raise
    finally:
        await _given_back(pool, conn)


async def _given_back(pool: asyncpg.Pool, conn: PoolConnectionProxy) -> None:
    """``pool.release(conn)``; one whose statement was cancelled (Cascade's own mark,
    ``GuardedConnection.cancel_unsettled``: asyncpg's cancel state is not public) is released
    with asyncpg's ``timeout``, :data:`CANCEL_GRACE`, which bounds its wait for the cancel's
    answer and its reset: past it asyncpg closes the connection, the pool opens another."""
    if not getattr(conn, "cancel_unsettled", False):
        await pool.release(conn)
        return
    with contextlib.suppress(TimeoutError):
        await pool.release(conn, timeout=CANCEL_GRACE)


def _close_if_cancelling(conn: PoolConnectionProxy, exc: BaseException | None) -> None:
    """Close ``conn`` when ``exc`` says its statement ran out of asyncpg's timeout (the
    server asked to cancel it), as :func:`borrowed` and :class:`Lent` give it back; one
    closed already (its cancel's grace ran out) is back in the pool, its proxy detached."""
    if isinstance(exc, DatabaseTimeout) and isinstance(exc.__cause__, TimeoutError):
        with contextlib.suppress(asyncpg.InterfaceError):
            conn.terminate()


class Lent:
    """A pooled connection a block can give back and take again (each take waits as
    :func:`acquire` does), given back at the block's end: for work that holds a connection
    for its statements but not across a slow call between them (a compaction's fast model)."""

    def __init__(self, pool: asyncpg.Pool, timeout: float) -> None:
        self._pool, self._timeout = pool, timeout
        self._conn: PoolConnectionProxy | None = None

    async def take(self) -> PoolConnectionProxy:
        if self._conn is None:
            self._conn = await acquire(self._pool, self._timeout)
        return self._conn

    async def give_back(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await _given_back(self._pool, conn)

    async def __aenter__(self) -> Lent:
        return self

    async def __aexit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if self._conn is not None:
            _close_if_cancelling(self._conn, exc)  # as :func:`borrowed` does
        await self.give_back()


class BoundedPool:
    """The pool as a request's handler uses it (the session and memory APIs, the events, a
    limited key's check): each statement it runs lends a connection as :func:`borrowed`
    does, so a request that finds every connection held waits ``timeout`` seconds for one
    (``CASCADE_POOL_TIMEOUT_SECONDS``, a chat's wait), then is the 503 ``server_busy`` of
    :class:`PoolExhausted`, rather than queueing until a connection comes free. Anything
    else is the pool's own (its size, its state)."""

    def __init__(self, pool: asyncpg.Pool, timeout: float) -> None:
        self.pool, self.timeout = pool, timeout

    def acquire(self) -> contextlib.AbstractAsyncContextManager[PoolConnectionProxy]:
        return borrowed(self.pool, self.timeout)

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        async with self.acquire() as conn:
            return await conn.execute(query, *args, timeout=timeout)

    async def executemany(self, query: str, args: Any, *, timeout: float | None = None) -> None:
        async with self.acquire() as conn:
            await conn.executemany(query, args, timeout=timeout)

    async def fetch(self, query: str, *args: Any, timeout: float | None = None) -> list[Any]:
        async with self.acquire() as conn:
            return await conn.fetch(query, *args, timeout=timeout)

    async def fetchrow(self, query: str, *args: Any, timeout: float | None = None) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchrow(query, *args, timeout=timeout)

    async def fetchval(
        self, query: str, *args: Any, column: int = 0, timeout: float | None = None
    ) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchval(query, *args, column=column, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


def lend(executor: Executor) -> contextlib.AbstractAsyncContextManager[Connection]:
    """A connection of ``executor`` for a block (a transaction's): one the pool lends (a
    :class:`BoundedPool`'s waits as it does), or ``executor`` itself when it is one."""
    if isinstance(executor, (BoundedPool, asyncpg.Pool)):
        return executor.acquire()
    return contextlib.nullcontext(executor)


# json and jsonb travel in PostgreSQL's binary format: a json value is its UTF-8 text, a
# jsonb value the same text after a version byte (1). In the text format asyncpg quotes
# every element of a json[] parameter byte by byte and PostgreSQL unquotes it the same way,
# a cost that grows with every large body stored (docs/perf.md). Binary arrays carry each
# element length-prefixed, copied whole.
_JSONB_VERSION = b"\x01"


def _decode_jsonb(data: bytes) -> Any:
    if data[:1] != _JSONB_VERSION:
        raise ValueError(f"unsupported jsonb format version {data[:1]!r}")
    return loads(memoryview(data)[1:])


async def _init_connection(conn: asyncpg.Connection, setting: str | None = None) -> None:
    try:
        await register_vector(conn)  # its type lookups are asyncpg's cached statements
    except asyncpg.PostgresError as exc:
        PoolerMismatch.raise_from(exc, setting)
        raise
    await conn.set_type_codec(
        "json", encoder=dumps, decoder=loads, schema="pg_catalog", format="binary"
    )
    await conn.set_type_codec(
        "jsonb",
        encoder=lambda value: _JSONB_VERSION + dumps(value),
        decoder=_decode_jsonb,
        schema="pg_catalog",
        format="binary",
    )


async def _reset(conn: asyncpg.Connection) -> None:
    """What a connection must lose before the pool hands it out again: nothing.

    asyncpg's default reset runs CLOSE ALL, UNLISTEN * and RESET ALL (and releases advisory
    locks), one more round trip on every release; Cascade never opens cursors, LISTENs, SETs
    or takes session-level locks on pooled connections (the event bus has its own, a
    session's requests are serialised by a lease on its row), and the pool already rolls
    back a transaction left open.
    """


OPENING_WAIT = 5.0
"""Seconds a pool that failed to open waits for its other connections' attempts to end."""


async def create_pool(dsn: str, *, setting: str = "DATABASE_URL", **kwargs: Any) -> asyncpg.Pool:
    """Open the pool: pgvector and JSON codecs on every connection, an outage logged once;
    the refusals (unreachable, or a pooler) name ``setting``, where ``dsn`` came from."""
    kwargs.setdefault("min_size", 1)
    kwargs.setdefault("max_size", 64)
    kwargs.setdefault("reset", _reset)
    kwargs.setdefault("connection_class", GuardedConnection)
    outage = Outage(functools.partial(connect, setting=setting))
    init = functools.partial(_init_connection, setting=setting)
    # the tasks that opened a connection while the pool opened; None once it did (a request
    # that opens one later is not kept: nor what it returns or raises)
    opening: set[asyncio.Task[Any]] | None = set()

    async def opened(*args: Any, **kwargs: Any) -> Any:
        if opening is not None and (task := asyncio.current_task()) is not None:
            opening.add(task)
        conn = await outage.connect(*args, **kwargs)
        if isinstance(conn, GuardedConnection):
            conn.command_timeout = kwargs.get("command_timeout")
        return conn

    try:
        pool = await asyncpg.create_pool(dsn, init=init, connect=opened, **kwargs)
    except Exception:
        # asyncpg gives up at the first refused connection while the others it opens at once
        # still run; they are waited for (and their connections closed by asyncpg), else a
        # start that exits on this error prints each one's failure as a traceback.
        if others := (opening or set()) - {asyncio.current_task()}:
            await asyncio.wait(others, timeout=OPENING_WAIT)
        raise
    finally:
        opening = None
    outage.arm()
    return pool
