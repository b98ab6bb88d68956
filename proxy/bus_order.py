"""A session's notifications handed to its streams in the order they were sent: one too big
for NOTIFY to carry its data is read back from the table in a task, and the session's later
notifications wait for that task, so a stream never gets an event before an earlier one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.bus_payloads import SESSION_GONE, BusEvent

__all__ = ["InOrder"]


class InOrder:
    """``EventBus``'s delivery of each notification on a session it has streams on: to
    ``deliver`` at once, or after the session's delivery still running; ``read_row``
    delivers the event a notification names without its data, read back from the table."""

    def __init__(
        self,
        deliver: Callable[[tuple[str, str], BusEvent], None],
        read_row: Callable[[tuple[str, str], str, int], Awaitable[None]],
    ) -> None:
        self._deliver = deliver
        self._read_row = read_row
        # per session, the delivery that must finish first (an event read back from the table)
        self._behind: dict[tuple[str, str], asyncio.Task[None]] = {}

    def hand(self, key: tuple[str, str], msg: dict[str, Any]) -> None:
        """Deliver the notification ``msg`` (its JSON payload, read) on the session ``key``."""
        before = self._behind.get(key)
        if msg.get("gone") and before is None:
            self._deliver(key, SESSION_GONE)
            return
        if msg.get("d") is None or before is not None:
            # A notification too big to carry its data is read back from the table; the
            # session's later ones wait for it, so a stream gets its events in order.
            task = asyncio.get_running_loop().create_task(self._deliver_after(before, key, msg))
            self._behind[key] = task
            task.add_done_callback(
                lambda t: self._behind.pop(key, None) if self._behind.get(key) is t else None
            )
            return
        self._deliver(key, BusEvent(msg["n"], msg["d"], msg["i"]))

    async def _deliver_after(
        self, before: asyncio.Task[None] | None, key: tuple[str, str], msg: dict[str, Any]
    ) -> None:
        if before is not None:
            await asyncio.wait({before})  # it never raises: see below
        if msg.get("gone"):
            self._deliver(key, SESSION_GONE)
            return
        if msg["d"] is not None:
            self._deliver(key, BusEvent(msg["n"], msg["d"], msg["i"]))
            return
        with contextlib.suppress(Exception):  # the stream's periodic catch-up still has it
            await self._read_row(key, msg["n"], msg["i"])
