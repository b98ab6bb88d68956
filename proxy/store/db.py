"""Connections and the pool: opening them, the codecs, and telling a lost database apart
(a 503) from a failed statement; the migration runner is ``migrations.py``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeAlias

import asyncpg
from pgvector.asyncpg import register_vector

from proxy.jsonio import dumps, loads
from proxy.store.dsn import redact_dsn
from proxy.store.outage import Outage
from proxy.store.pooler import Pooler, pooler_kwargs, unnamed_pooler

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

__all__ = [
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
Executor: TypeAlias = "asyncpg.Pool | Connection"
"""What runs a statement: the pool (which lends a connection for it) or one connection."""


class DatabaseUnavailable(RuntimeError):
    """A connection could not be opened (the migrations' or the pool's): the message names
    the server, never the password; ``sqlstate`` is the server's refusal, when it sent one."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


class DatabaseTimeout(DatabaseUnavailable):
    """A statement got no answer in time: the pool's bound on each statement
    (``CASCADE_DB_STATEMENT_TIMEOUT_SECONDS``, asyncpg's ``command_timeout``, which cancels it
    on the server) ran out, or the database cancelled it (a ``statement_timeout`` or
    ``lock_timeout`` set for the role or the database, a ``pg_cancel_backend``): a lock held
    by a long transaction, a server overloaded, a pooler paused. A 503 to retry, like an
    outage, rather than a request that hangs or a 500."""


class UnreadableUrl(DatabaseUnavailable):
    """A database URL asyncpg cannot read (a port that is no number, another scheme, a
    parameter it refuses, a certificate file it names that does not load): a setting to
    mend, which no retry does, unlike a server that did not answer."""


class TlsRefused(DatabaseUnavailable):
    """The server answered the TLS request with no (it does no TLS, which the URL's
    ``sslmode`` requires) or with what no PostgreSQL server says (another service on that
    port): a setting to mend (the sslmode, the port, the server's TLS), which it says to
    every retry."""


class PoolerMismatch(DatabaseUnavailable):
    """The database URL leads to a transaction-mode pooler that ``CASCADE_DB_POOLER`` does not
    name: asyncpg's cached statements met a server connection other than the one that
    prepared them. The message says what to set (:func:`~proxy.store.pooler.unnamed_pooler`);
    at start it is the refusal, naming where the URL came from, under a request a 503 whose
    log line says it (a pooled connection's statement does not know where its URL came from)."""

    @classmethod
    def raise_from(cls, exc: BaseException, setting: str | None = None) -> None:
        """Raise one for ``exc``, naming ``setting``, when ``exc`` is such a lost statement."""
        if (message := unnamed_pooler(exc, setting)) is not None:
            raise cls(message, getattr(exc, "sqlstate", None)) from exc


# SQLSTATEs of a server that is going away or not yet back: admin_shutdown (what
# pg_terminate_backend and a fast shutdown send), crash_shutdown, cannot_connect_now (the
# server is starting or in recovery), database_dropped. Class 08 (connection exception) is
# matched by its asyncpg base class. Not 57014 (query_canceled): that is a statement's own
# timeout or a cancel, not the database going away.
_GONE_STATES = frozenset({"57P01", "57P02", "57P03", "57P04"})


_LOST_MESSAGES = ("connection is closed", "connection has been released back to the pool")
# The server's FATAL (a shutdown, a terminated backend) reached a connection while it was
# idle: asyncpg's protocol is left consuming that error (its state 2) or failed, and
# refuses the next statement with an InternalClientError saying so.
_LOST_PROTOCOL = ("another operation (2) is in progress", 'protocol is in the "failed" state')


def connection_lost(exc: BaseException, conn: Any = None) -> bool:
    """Whether ``exc``, raised by a statement on ``conn``, means the connection or the
    server went away (rather than the statement being wrong): a lost socket, a connection
    error, a shutdown, or asyncpg refusing a call because the connection is closed."""
    if isinstance(exc, asyncpg.PostgresConnectionError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        return exc.sqlstate in _GONE_STATES
    if isinstance(exc, asyncpg.InternalClientError):
        return any(m in str(exc) for m in _LOST_PROTOCOL)
    if isinstance(exc, asyncpg.InterfaceError):
        # A pooled connection that closes while held goes back to the pool at once, and its
        # holder's next call says it was released: the holder never released it itself.
        closed = conn.is_closed() if conn is not None else False
        return closed or any(m in str(exc) for m in _LOST_MESSAGES)
    # ConnectionResetError, BrokenPipeError...; not TimeoutError (also an OSError), which a
    # statement's own timeout raises while the connection is fine.
    return isinstance(exc, OSError) and not isinstance(exc, TimeoutError)


def _unavailable(exc: BaseException) -> DatabaseUnavailable:
    return DatabaseUnavailable(
        f"the database connection was lost under a request: {type(exc).__name__}: {exc}"
    )


_SLOW = (TimeoutError, asyncpg.QueryCanceledError, asyncpg.LockNotAvailableError)
"""A statement with no answer in time: asyncpg's ``command_timeout``, the server's cancel."""


def _timeout(exc: BaseException, bound: float | None) -> DatabaseTimeout:
    if isinstance(exc, TimeoutError):
        within = f"within {bound:g} s" if bound else "in time"
        return DatabaseTimeout(f"the database did not answer a statement {within}")
    return DatabaseTimeout(f"the database cancelled a statement: {type(exc).__name__}: {exc}")


def _guarded(method: Callable[..., Coroutine[Any, Any, Any]]) -> Any:
    """``method`` of asyncpg's Connection, raising :class:`DatabaseUnavailable` when the
    connection was lost under it, or the server is out of resources (SQLSTATE class 53: a
    full disk, out of memory, too many connections), which no fault of the request's or the
    proxy's causes and a retry may get past (typed as the method it wraps, overloads
    included)."""

    @functools.wraps(method)
    async def guarded(self: asyncpg.Connection, *args: Any, **kwargs: Any) -> Any:
        try:
            return await method(self, *args, **kwargs)
        except Exception as exc:
            if connection_lost(exc, self):
                raise _unavailable(exc) from exc
            if isinstance(exc, _SLOW):
                config = getattr(self, "_config", None)  # asyncpg's, which it does not type
                raise _timeout(exc, getattr(config, "command_timeout", None)) from exc
            if isinstance(exc, asyncpg.InsufficientResourcesError):
                raise DatabaseUnavailable(
                    f"PostgreSQL is out of resources: {type(exc).__name__}: {exc}", exc.sqlstate
                ) from exc
            PoolerMismatch.raise_from(exc)
            raise

    return guarded


@contextlib.contextmanager
def unavailable_when_lost() -> Iterator[None]:
    """Around a block that holds a pooled connection (a request's, a compaction's): an error
    that says the connection was lost becomes :class:`DatabaseUnavailable`. The connection's
    own statements already raise it (:class:`GuardedConnection`); a connection that closed
    while held between two statements is taken back by the pool, and its holder's next call
    fails on asyncpg's pool proxy before reaching the connection."""
    try:
        yield
    except DatabaseUnavailable:
        raise
    except Exception as exc:
        if connection_lost(exc):
            raise _unavailable(exc) from exc
        raise


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

    execute = _guarded(asyncpg.Connection.execute)
    executemany = _guarded(asyncpg.Connection.executemany)
    fetch = _guarded(asyncpg.Connection.fetch)
    fetchrow = _guarded(asyncpg.Connection.fetchrow)
    fetchval = _guarded(asyncpg.Connection.fetchval)


class PoolExhausted(RuntimeError):
    """No pooled connection came free within the wait: every one is running statements for
    other requests (a chat request holds one only while its step runs statements, never
    while the provider answers)."""


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
    raises :class:`DatabaseUnavailable` (:func:`unavailable_when_lost`)."""
    conn = await acquire(pool, timeout)
    try:
        with unavailable_when_lost():
            yield conn
    finally:
        await pool.release(conn)


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
            await self._pool.release(conn)

    async def __aenter__(self) -> Lent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.give_back()


async def connect(
    dsn: str | None = None, *args: Any, setting: str = "DATABASE_URL", **kwargs: Any
) -> asyncpg.Connection:
    """asyncpg.connect; a failure is a DatabaseUnavailable, whose message names ``setting``,
    where ``dsn`` came from. The pool opens its connections through it too, so a request
    that finds the database gone can be told so (a 503). ``dsn`` may be None, as the pool's
    connect callback allows: libpq's PG* defaults apply."""
    try:
        return await asyncpg.connect(dsn, *args, **kwargs)
    except (
        TimeoutError,
        OSError,
        ValueError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
    ) as exc:
        reason = redact_dsn(f"{type(exc).__name__}: {exc}", dsn)
        if isinstance(exc, TimeoutError) and not str(exc):  # asyncpg's says nothing
            reason = f"TimeoutError: no answer within {kwargs.get('timeout', 60):g} s"
        where = redact_dsn(dsn) if dsn is not None else "the PG* defaults"
        # asyncpg's ClientConfigurationError is a ValueError; a certificate file that does not
        # load is an OSError raised while it reads the URL, before any server is asked
        unread = isinstance(exc, ValueError) or _reading_url(exc.__traceback__)
        refused = isinstance(exc, ConnectionError) and "rejected SSL upgrade" in str(exc)
        kind = UnreadableUrl if unread else TlsRefused if refused else DatabaseUnavailable
        raise kind(
            f"cannot connect to PostgreSQL at {where} ({setting}): {reason}",
            getattr(exc, "sqlstate", None),
        ) from None


def _reading_url(tb: TracebackType | None) -> bool:
    """Whether the traceback ``tb`` passes through asyncpg's reading of the connection's
    settings (the URL and the files it names), where an error is a setting to mend: the
    same FileNotFoundError is a Unix socket not there yet when it is raised connecting."""
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "_parse_connect_arguments":
            return True
        tb = tb.tb_next
    return False


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
        return await outage.connect(*args, **kwargs)

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
