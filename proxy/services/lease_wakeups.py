"""Wake-ups of this replica's waiters for a session's lease (migration 0023).

A request (or a session operation) that finds its session's lease held by another replica
polls it, its pauses doubling to ``store.leases.POLL_MAX_SECONDS``. When the holder frees the
lease while someone waits in the session's queue, the database announces it on the
``cascade_lease`` channel, which the event bus LISTENs on beside its own; each pause of a
waiter that ``watch``-es its session then ends at the first of its poll delay and that
notification. The poll stays: a notification can be missed (the listener reconnecting, a
lease freed by expiry), and then the waiter tries as late as it did before.

The registry holds a session only while one of its waiters is registered: from the first
pause of a ``watch`` to its end. A notification that comes while the waiter is not pausing
(its try in flight, its connection going back to the pool) is kept for its next pause, which
then returns at once: a session freed just after a try is not left for a whole poll delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Iterator

__all__ = ["LEASE_CHANNEL", "LeaseWakeups", "Wake", "session_hash"]

LEASE_CHANNEL = "cascade_lease"


def session_hash(tenant: str, session_id: str) -> str:
    """The payload of a session's notification: the hex sha256 of its tenant, a NUL and its
    id, as ``cascade_lease_freed_v1`` (migration 0023) builds it (text holds no NUL, so no
    two keys share the bytes hashed). A tenant's name has no length limit; NOTIFY's payload
    has one."""
    return hashlib.sha256(f"{tenant}\0{session_id}".encode()).hexdigest()


class Wake:
    """One waiter's registration for its session's notifications (``LeaseWakeups.watch``)."""

    __slots__ = ("_wakeups", "_hash", "_event")

    def __init__(self, wakeups: LeaseWakeups, key: str) -> None:
        self._wakeups = wakeups
        self._hash = key
        self._event: asyncio.Event | None = None  # registered from the first wait on

    async def wait(self, seconds: float) -> bool:
        """Sleep ``seconds``, or until the session is announced free (since the previous
        wait, or during this one); True when a notification ended it."""
        event = self._event
        if event is None:
            event = self._event = asyncio.Event()
            self._wakeups._waiting.setdefault(self._hash, set()).add(event)
        if not event.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await event.wait()
        woken = event.is_set()
        event.clear()
        return woken

    def _close(self) -> None:
        event = self._event
        if event is None:
            return
        waiting = self._wakeups._waiting
        events = waiting.get(self._hash)
        if events is not None:
            events.discard(event)
            if not events:
                del waiting[self._hash]


class LeaseWakeups:
    """This replica's waiters for sessions' leases, by session (the module docstring)."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def watch(self, tenant: str, session_id: str) -> Iterator[Wake]:
        """A ``with`` block around a waiter's tries: its ``Wake`` registers at its first
        wait (a request that never waits registers nothing) and is dropped at the end."""
        wake = Wake(self, session_hash(tenant, session_id))
        try:
            yield wake
        finally:
            wake._close()

    def notified(self, payload: str) -> None:
        """Wake every waiter on the session ``payload`` names (a ``cascade_lease``
        notification; one for a session nobody here waits for is ignored)."""
        for event in self._waiting.get(payload, ()):
            event.set()

    def waiting(self) -> int:
        """How many sessions have a registered waiter here."""
        return len(self._waiting)
