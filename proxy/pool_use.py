"""Which of the provider transport's pools are serving requests, and the closing of those a
config reload retired (``ProviderTransport.keep_only``) or a rotated ``caFile`` replaced,
once the last request through each is done.

A pool is in use from the moment a request is handed to it until its response is closed
(its body read, or dropped): a stream relayed for minutes holds its pool so long, and a pool
closed under it would cut it. A retired pool takes no new request; the transport makes a
new one for an origin that comes back.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Callable

import httpx

__all__ = ["PoolUse", "Released"]

log = logging.getLogger("cascade.upstream")


class PoolUse:
    """The requests each pool serves, by the pool's identity; a retired pool closes when its
    count falls to zero (at once when it is idle)."""

    def __init__(self) -> None:
        self._busy: dict[int, int] = {}
        self._retired: dict[int, httpx.AsyncBaseTransport] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def hold(self, pool: httpx.AsyncBaseTransport) -> Callable[[], None]:
        """Count a request on ``pool``; the function that ends it, once however often called."""
        self._busy[id(pool)] = self._busy.get(id(pool), 0) + 1
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                self._release(pool)

        return release

    def _release(self, pool: httpx.AsyncBaseTransport) -> None:
        left = self._busy.pop(id(pool)) - 1
        if left:
            self._busy[id(pool)] = left
        elif self._retired.pop(id(pool), None) is not None:
            self._close(pool)

    def retire(self, pool: httpx.AsyncBaseTransport) -> None:
        if id(pool) in self._busy:
            self._retired[id(pool)] = pool
        else:
            self._close(pool)

    def _close(self, pool: httpx.AsyncBaseTransport) -> None:
        """Close ``pool`` in a task of a context of its own: the last request through it
        ends it here, and the close is the process's (a reload's), not that request's."""
        task = asyncio.get_running_loop().create_task(_aclose(pool), context=contextvars.Context())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close the retired pools still in use (the process is stopping) and wait for every
        close begun."""
        retired, self._retired = list(self._retired.values()), {}
        for pool in retired:
            self._close(pool)
        await asyncio.gather(*list(self._closing))


async def _aclose(pool: httpx.AsyncBaseTransport) -> None:
    try:
        await pool.aclose()
    except Exception as exc:  # noqa: BLE001 - a pool that fails to close is gone all the same
        log.warning("closing a retired provider pool: %s: %s", type(exc).__name__, exc)


class Released(httpx.AsyncByteStream):
    """A response body that ends its pool's use (``PoolUse.hold``) when it is closed."""

    def __init__(self, inner: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._inner = inner
        self._release = release

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._inner.__aiter__()  # the body's own iterator: nothing added per chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._release()
