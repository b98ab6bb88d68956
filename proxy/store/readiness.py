"""/readyz's check of the database, shared: at most one pooled connection and one round
trip a second, however often the probe, which needs no proxy key, is called."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

__all__ = ["REUSE_SECONDS", "SharedCheck", "database_failure", "database_readiness"]

T = TypeVar("T")

REUSE_SECONDS = 1.0
"""How long a check's answer stands, from the check's start: the rate at which /readyz
reaches the database, and the longest a change of the database's state goes unseen when no
connection closes to say so."""

CHECK_TIMEOUT = 2.0
"""The wait for a pooled connection, and then for ``SELECT 1``: a pool with none free for
this long cannot serve requests either."""


class SharedCheck(Generic[T]):
    """One check in flight, whose answer every caller shares: a caller that arrives while it
    runs waits for it, and one that arrives within ``reuse_seconds`` of its start takes its
    answer. :meth:`forget` drops the answer (a connection it used closed), so the next caller
    checks again. A caller cancelled while waiting leaves the check running for the others.
    ``check`` never raises: its answer says what failed."""

    def __init__(
        self,
        check: Callable[[], Awaitable[T]],
        *,
        reuse_seconds: float = REUSE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._check = check
        self._reuse = reuse_seconds
        self._clock = clock
        self._started = float("-inf")
        self._task: asyncio.Task[T] | None = None

    async def result(self) -> T:
        now = self._clock()
        task = self._task
        if task is None or (task.done() and now - self._started >= self._reuse):
            self._started = now
            task = self._task = asyncio.ensure_future(self._check())
        return await asyncio.shield(task)

    def forget(self, *_: Any) -> None:
        """Drop the answer once the check in flight, if any, has given it to its waiters."""
        self._started = float("-inf")


async def database_failure(pool: Any, on_lost: Callable[[Any], None]) -> str | None:
    """None when the database answers ``SELECT 1`` on a pooled connection within
    :data:`CHECK_TIMEOUT`, else the failure's class name (never its text, which names the
    database's host). ``on_lost`` is called when the connection used closes: the server
    going away closes every one, the idle ones included."""
    try:
        async with pool.acquire(timeout=CHECK_TIMEOUT) as conn:
            conn.add_termination_listener(on_lost)  # once per connection: a set
            await conn.fetchval("SELECT 1", timeout=CHECK_TIMEOUT)
    except Exception as exc:
        return type(exc).__name__
    return None


def database_readiness(pool: Any) -> SharedCheck[str | None]:
    """The replica's readiness: :func:`database_failure` on ``pool``, shared, each answer
    standing for :data:`REUSE_SECONDS` unless a connection it used closes first."""
    shared: SharedCheck[str | None] = SharedCheck(
        lambda: database_failure(pool, shared.forget), reuse_seconds=REUSE_SECONDS
    )
    return shared
