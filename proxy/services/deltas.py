"""``session.message.delta.appended``: a streamed reply's text, live, to whoever watches.

DESIGN §6 names the transient event; sending one per chunk would put a NOTIFY (a database
round trip) on every chunk of every stream. Instead a ``DeltaTap`` rides along one client
stream and, only while the session is watched (``EventBus.watched``: this replica's streams
at once, another replica's within one keeper refresh), publishes the text that came since
the last event, at most once per :data:`FLUSH_INTERVAL`, and once more when the stream ends,
before the turn stores the reply (whose ``session.message.appended`` follows it).

The text is read from the round's ``StreamAccumulator``, which the relay fills anyway, so the
relay's per-chunk path gains only ``poll``: a clock read and a comparison, and a set lookup
once per interval. The publishing runs in a task of its own (``_run``), started when the
session turns out watched; the client's bytes never wait for it, and its failures are logged
once per stream and otherwise ignored. Text that came while nobody watched goes out with the
first event after someone does, so a late watcher still gets the whole reply's text so far.

Only ``content`` is sent (tool-call arguments and refusals are not): ``data`` is ``choice``
(index), ``delta`` (text), ``session_id`` and ``ts``, and ``part``/``parts`` when a delta too
long for one NOTIFY is cut into several events (``EventBus.pieces``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from proxy.bus import EventBus
from proxy.cascade.types import MESSAGE_DELTA_APPENDED
from proxy.chunks import StreamAccumulator
from proxy.store import events as store

if TYPE_CHECKING:
    from proxy.services.request import Step
    from proxy.store.db import Executor

__all__ = ["FLUSH_INTERVAL", "DeltaTap", "tap"]

log = logging.getLogger("cascade.deltas")

FLUSH_INTERVAL = 0.25
"""Seconds between two delta events of one stream (at most one per interval, plus the last)."""
FINAL_WAIT = 2.0
"""Seconds the end of a stream waits for its last delta event before the reply is stored."""


class _NoTap:
    """What a stream follows when there is no bus to publish on (a bare ``Forwarder``)."""

    def round(self, acc: StreamAccumulator) -> None:
        pass

    def poll(self) -> None:
        pass

    async def close(self) -> None:
        pass


def tap(bus: EventBus | None, pool: Executor | None, step: Step) -> DeltaTap | _NoTap:
    """The delta events of the client stream that answers ``step``."""
    if bus is None or pool is None:
        return _NoTap()
    return DeltaTap(bus, pool, step.ctx.tenant, step.ctx.session_id)


class DeltaTap:
    """The delta events of one client stream, which may span several upstream rounds."""

    __slots__ = (
        "_bus",
        "_pool",
        "_key",
        "_due",
        "_acc",
        "_marks",
        "_carry",
        "_task",
        "_wake",
        "_closed",
        "_failed",
    )

    def __init__(self, bus: EventBus, pool: Executor, tenant: str, session_id: str) -> None:
        self._bus = bus
        self._pool = pool  # what the NOTIFYs run on (a pool: a connection per statement)
        self._key = (tenant, session_id)
        self._due = 0.0  # when ``poll`` next asks whether the session is watched
        self._acc: StreamAccumulator | None = None
        self._marks: dict[int, int] = {}  # per choice, the pieces of ``_acc`` already sent
        self._carry: dict[int, list[str]] = {}  # earlier rounds' text not sent yet
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._closed = False
        self._failed = False

    def round(self, acc: StreamAccumulator) -> None:
        """Follow a new upstream round's accumulator (the last one's unsent text is kept)."""
        self._take_text()  # the previous round's rest, before its marks are dropped
        self._acc, self._marks = acc, {}

    def poll(self) -> None:
        """Called for every piece the relay sends: cheap until the interval is up, then one
        set lookup; a watched session starts the publishing task."""
        if self._task is None and (now := time.monotonic()) >= self._due:
            self._due = now + FLUSH_INTERVAL
            if self._bus.watched(self._key):
                self._task = asyncio.create_task(self._run(), name="cascade-deltas")

    async def close(self) -> None:
        """The stream ended: publish what is left if the session is watched, waiting at most
        :data:`FINAL_WAIT`, so the last delta precedes the stored reply's event."""
        self._closed = True
        if self._task is None:
            if not self._bus.watched(self._key):
                return
            self._task = asyncio.create_task(self._run(), name="cascade-deltas")
        self._wake.set()
        await asyncio.wait({self._task}, timeout=FINAL_WAIT)

    async def _run(self) -> None:
        """Every interval while watched, publish what came in it; at once after ``close``.
        The first event waits an interval too, so a stream of ``d`` seconds makes at most
        ``d / FLUSH_INTERVAL + 1`` of them."""
        while True:
            if not self._closed:
                try:
                    async with asyncio.timeout(FLUSH_INTERVAL):
                        await self._wake.wait()
                except TimeoutError:
                    pass
            closed = self._closed
            if not self._bus.watched(self._key):  # nobody left: ``poll`` looks again later
                self._task = None
                return
            await self._flush()
            if closed:
                return

    def _take_text(self) -> None:
        if self._acc is not None:
            for index, text in self._acc.text_since(self._marks).items():
                self._carry.setdefault(index, []).append(text)

    async def _flush(self) -> None:
        self._take_text()
        carry, self._carry = self._carry, {}
        tenant, session_id = self._key
        payloads = [
            payload
            for index in sorted(carry)
            if (text := "".join(carry[index]))
            for payload in self._bus.pieces(
                tenant,
                session_id,
                MESSAGE_DELTA_APPENDED,
                {"choice": index, "delta": text},
                "delta",
            )
        ]
        if not payloads:
            return
        try:
            await store.notify_all(self._pool, payloads=payloads)
        except Exception as exc:  # a live view misses text; the stored reply has it all
            if not self._failed:
                self._failed = True
                log.warning("could not publish a streamed reply's delta events: %s", exc)
