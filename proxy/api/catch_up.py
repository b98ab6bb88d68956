"""Catch-up reads shared by the event streams open on one session (``api/events.py``).

Every open stream reads the events table now and then for what NOTIFY did not bring it
(the periodic catch-up, and the read before a live event in its first seconds). The streams
of one session on this replica share those reads: the session's streams catch up on one
schedule (:meth:`Reads.due`), and a stream that needs a read takes the session's latest one
when it fits, waits for the one under way, or starts one itself, from the lowest mark of the
session's streams. A read fits when it starts at or below the stream's mark and either began
at or after the moment the stream wants one read from (``since``), or holds the live event
the stream waits on (``holding``: a read that sees that committed row sees every row
committed before it), or began after the stream asked for it, so after the event was heard
(it sees what a read of the stream's own would: the row, the session gone, or the same
failure). A read a stream starts itself is always taken. Each stream then judges
the rows on its own: its key's reach of the session's agent, its mark, what it sent.

The session is the tenant's (a session id is per tenant) made at ``created_at`` and read
through ``pool`` (one per replica): streams of another tenant on the same id, or of a session
made again under it, never share a read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any, Protocol

from proxy.store import events as store
from proxy.store.db import DatabaseUnavailable, PoolExhausted

__all__ = ["MISSED", "Page", "Reads", "each", "kept_open", "pages", "sharing"]

MISSED = (DatabaseUnavailable, PoolExhausted)
"""What ends a stream's read but not the stream: an outage, or every pooled connection
held past the request's wait (``db.BoundedPool``); what the read missed comes later."""

Page = tuple[str | None, list[Any]] | None
"""One statement's answer: the session's agent and its rows, or None (no such session)."""

PAGE = 1000
"""Rows a statement reads at most; a full page is followed by the next."""

SLACK = 0.01
"""Seconds a read may begin before the moment asked for and still fit: a timer may fire a
little early, and a row a read misses comes with the next one (a stream's mark only moves
over rows it read)."""


STALLED = 10.0
"""Seconds after which a stream that asked for no read no longer sets where a shared read
starts: it waits in a send its client does not take (and is closed after
``SEND_TIMEOUT_SECONDS``), and its mark, left behind, would have every read return what the
others have; should it ask again, a read from its own mark serves it."""


class _Member(Protocol):
    mark: int


class _Read:
    def __init__(self, after: int, started: float, task: asyncio.Task[list[Page]]) -> None:
        self.after, self.started, self.task = after, started, task

    def fits(self, after: int, since: float | None, holding: int | None, asked: float) -> bool:
        if self.after > after:
            return False
        if since is not None:
            return self.started >= since - SLACK
        if self.started > asked:  # begun after the live event was heard: it sees its row
            return True
        if not self.task.done() or self.task.cancelled() or self.task.exception():
            return False
        pages = self.task.result()
        return any(p is not None and any(r["id"] == holding for r in p[1]) for p in pages)


class Reads:
    """One session's shared reads, while some stream here is open on it."""

    def __init__(self, key: tuple[Any, str, str, datetime], origin: float) -> None:
        self.pool, self.tenant, self.session_id, self.created_at = key
        self.origin = origin
        self.members: dict[_Member, float] = {}  # each stream's last ask for a read
        self.latest: _Read | None = None

    def due(self, now: float, every: float) -> float:
        """The session's next catch-up after ``now``: every ``every`` seconds from when its
        first stream here opened, so its streams catch up together, with one read."""
        return self.origin + ((now - self.origin) // every + 1) * every

    async def read(
        self,
        member: _Member,
        settle_seconds: float,
        *,
        since: float | None = None,
        holding: int | None = None,
    ) -> list[Page]:
        """The pages of a read past ``member``'s mark that fits (see the module); a last page
        of None says the session is gone. An outage or a busy pool (``MISSED``) raises to
        every stream that takes the read. Any other failure raises only to the streams it depends
        on, those whose mark it started from: it may come of what lies past that mark (a
        statement that runs out of time over a long backlog), so a stream further on reads
        again from the lowest mark above it, and so on, up to a read from its own."""
        after, floor = member.mark, -1  # a failed read started at ``floor``: none from it
        self.members[member] = asked = asyncio.get_running_loop().time()
        while True:
            while (latest := self.latest) is not None and not latest.task.done():
                if latest.after <= floor or (
                    since is not None and not latest.fits(after, since, None, asked)
                ):
                    break
                with contextlib.suppress(Exception):  # then the latest, which may be another
                    await asyncio.shield(latest.task)
            if (
                latest is None
                or latest.after <= floor
                or not latest.fits(after, since, holding, asked)
            ):
                latest = self._start(after, settle_seconds, floor)
            try:
                return await asyncio.shield(latest.task)  # its result, or its failure
            except MISSED:
                raise
            except Exception:
                if latest.after >= after:  # a read from this stream's own mark
                    raise
                floor = latest.after

    def _start(self, after: int, settle_seconds: float, floor: int) -> _Read:
        loop = asyncio.get_running_loop()
        asking = (
            m.mark
            for m, at in self.members.items()
            if at >= loop.time() - STALLED and m.mark > floor
        )
        after = min([after, *asking])
        task = loop.create_task(self._fetch(after, settle_seconds))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved
        self.latest = _Read(after, loop.time(), task)
        return self.latest

    async def _fetch(self, after: int, settle_seconds: float) -> list[Page]:
        found = pages(
            self.pool, self.tenant, self.session_id, self.created_at, after, settle_seconds
        )
        return [page async for page in found]


async def pages(
    pool: Any,
    tenant: str,
    session_id: str,
    created_at: datetime,
    after: int,
    settle_seconds: float,
) -> AsyncIterator[Page]:
    """The session's rows past ``after``, a statement of at most ``PAGE`` rows at a time,
    through the first page that is not full (or None: no such session). A shared read
    takes them all; a stream's replay as it opens, its own read, takes them as they come."""
    while True:
        page = await store.fetch_session_events_after(
            pool,
            tenant=tenant,
            session_id=session_id,
            after_id=after,
            created_at=created_at,
            settle_seconds=settle_seconds,
        )
        yield page
        if page is None or len(page[1]) < PAGE:
            return
        after = page[1][-1]["id"]


async def each(pages: list[Page]) -> AsyncIterator[Page]:
    """A shared read's ``pages``, as :func:`pages` yields a stream's own."""
    for page in pages:
        yield page


async def kept_open(frames: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """A stream's periodic catch-up (``frames``); an outage, which the pool says once, or a
    busy pool (``MISSED``) ends them, not the stream: it reads what it missed once the
    database is back, or a connection free."""
    with contextlib.suppress(*MISSED):
        async for frame in frames:
            yield frame


_SESSIONS: dict[tuple[Any, str, str, datetime], Reads] = {}


@contextlib.contextmanager
def sharing(
    pool: Any, tenant: str, session_id: str, created_at: datetime, member: _Member
) -> Iterator[Reads]:
    """The session's shared reads, ``member`` (a stream's cursor, whose ``mark`` a read
    starts at or below) among their streams until the block ends."""
    key = (pool, tenant, session_id, created_at)
    reads = _SESSIONS.get(key)
    if reads is None:
        reads = _SESSIONS[key] = Reads(key, asyncio.get_running_loop().time())
    reads.members[member] = asyncio.get_running_loop().time()
    try:
        yield reads
    finally:
        reads.members.pop(member, None)
        if not reads.members and _SESSIONS.get(key) is reads:
            del _SESSIONS[key]
