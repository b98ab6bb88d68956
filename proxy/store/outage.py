"""One log line when PostgreSQL goes away under a running pool, and one when it is back."""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Outage"]

log = logging.getLogger("cascade")


class Outage:
    """Wraps the pool's connect: says once that PostgreSQL cannot be reached, with the cause
    (the connect's message: the server, never the password), and once that it can again.

    asyncpg's own line for each failed try to restore the pool's floor, a traceback every
    second or two while the server is down, is dropped by ``proxy.logs``; /readyz answers 503
    meanwhile. A refusal while the pool opens is the start's to report, so the watch begins
    when :meth:`arm` is called, once the pool is open.
    """

    def __init__(self, connect: Callable[..., Awaitable[Any]]) -> None:
        self._connect = connect
        self._armed = False
        self._since: float | None = None

    def arm(self) -> None:
        self._armed = True

    async def connect(self, *args: Any, **kwargs: Any) -> Any:
        try:
            conn = await self._connect(*args, **kwargs)
        except Exception as exc:
            if self._armed and self._since is None:
                self._since = time.monotonic()
                _say("PostgreSQL is unreachable, the pool retries: %s", exc)
            raise
        if self._since is not None:
            down = time.monotonic() - self._since
            self._since = None
            _say("PostgreSQL is reachable again, after %.0f s", down)
        return conn


def _say(message: str, *args: object) -> None:
    """One of the outage's lines, in a context of its own: the connect may run in a
    request's task, and the outage is the process's, not that request's (whose 503 says
    what it met)."""
    contextvars.Context().run(log.warning, message, *args)
