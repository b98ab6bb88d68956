"""What a database failure is: the errors the API answers with a 503 (the database
unavailable or too slow, the pool exhausted) and the settings to mend, and telling a lost
connection or an unanswered statement apart from a failed one; ``db.py`` raises them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import asyncpg

from proxy.store.pooler import unnamed_pooler

__all__ = [
    "DatabaseUnavailable",
    "DatabaseTimeout",
    "PoolerMismatch",
    "UnreadableUrl",
    "TlsRefused",
    "PoolExhausted",
    "connection_lost",
    "lost",
    "timed_out",
    "SLOW",
    "unavailable_when_lost",
]


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


def lost(exc: BaseException) -> DatabaseUnavailable:
    return DatabaseUnavailable(
        f"the database connection was lost under a request: {type(exc).__name__}: {exc}"
    )


SLOW = (TimeoutError, asyncpg.QueryCanceledError, asyncpg.LockNotAvailableError)
"""A statement with no answer in time: asyncpg's ``command_timeout``, the server's cancel."""


def timed_out(exc: BaseException, bound: float | None) -> DatabaseTimeout:
    if isinstance(exc, TimeoutError):
        within = f"within {bound:g} s" if bound else "in time"
        return DatabaseTimeout(f"the database did not answer a statement {within}")
    return DatabaseTimeout(f"the database cancelled a statement: {type(exc).__name__}: {exc}")


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
            raise lost(exc) from exc
        raise


class PoolExhausted(RuntimeError):
    """No pooled connection came free within the wait: every one is running statements for
    other requests (a chat request holds one only while its step runs statements, never
    while the provider answers)."""
