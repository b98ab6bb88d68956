"""One replica's queue per session, in front of the connection pool.

A session's requests are serialised by an advisory lock that lives on the connection of the
request holding it (``cascade_begin_step`` takes it, ``record_step`` releases it). Without a
queue here, every request that arrives while its session is busy takes a pooled connection
only to block on that lock: a client that sends 20 requests on one session at once holds 20
connections, and other sessions wait for the pool (DESIGN §4: different sessions never wait
on each other). With it, they wait here, first come first served, holding nothing, and only
the request at the head of each session's queue takes a connection. The advisory lock still
serialises a session across replicas and against the session API's operations.
"""

from __future__ import annotations

import asyncio

__all__ = ["SessionLocks"]

Key = tuple[str, str]


class SessionLocks:
    def __init__(self) -> None:
        self._locks: dict[Key, tuple[asyncio.Lock, int]] = {}  # lock, requests holding or waiting

    async def acquire(self, key: Key) -> None:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:  # cancelled while waiting: leave the queue
            self._leave(key)
            raise

    def release(self, key: Key) -> None:
        self._locks[key][0].release()
        self._leave(key)

    def waiting(self, key: Key) -> int:
        """Requests holding or waiting for ``key`` (0 when none: the entry is gone)."""
        entry = self._locks.get(key)
        return entry[1] if entry else 0

    def _leave(self, key: Key) -> None:
        lock, users = self._locks[key]
        if users > 1:
            self._locks[key] = (lock, users - 1)
        else:
            del self._locks[key]
