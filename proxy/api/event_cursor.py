"""What one event stream has sent (``api/events.py``), and its reads of the events table
past that: the replay as it opens, its catch-ups, the read before a live event in its first
seconds. It decides which rows go out, and how far its mark may move."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from proxy.api import catch_up
from proxy.api.catch_up import Reads
from proxy.bus import BusEvent
from proxy.store import nul

__all__ = ["SETTLE_SECONDS", "TOKEN_IDS", "Cursor", "frame"]


SETTLE_SECONDS = 10.0
"""How long after its transaction began an event is taken as final: ids come from a
sequence, and two writers (a request, a background compaction, another replica) can commit
them out of order, so a stream that moved its mark past id n+1 as soon as it saw it would
drop id n when n committed a moment later. Every event is written by one short statement."""


TOKEN_IDS = 64
"""The most ids a resume token lists (``Cursor.token``); a stream that sent more above its
mark lists the lowest ones: a reconnect sends the others again (a client dedupes by id),
rather than skip an event a writer commits late below its last id."""


def frame(event: BusEvent) -> dict[str, Any]:
    """A persisted event's data is stored through ``nul.encode_json``: decoded here, on the
    one way out of the table (replay, catch-up and NOTIFY alike)."""
    data = event.data if event.id is None else nul.decode_json(event.data)
    out = {"event": event.name, "data": json.dumps(data)}
    if event.id is not None:
        out["id"] = str(event.id)
    return out


class Cursor:
    """What one stream has sent: every event up to ``mark`` (or it never will exist), and
    the ids above it in ``sent``; ``gone`` once a read found the session deleted, another
    made under its id (``created_at``, the one the stream was opened on), or the session
    run by an agent ``reaches`` (the stream's key) refuses.

    A stream resumed after ``after`` (its client's Last-Event-ID) starts at ``floor``, the
    session's last settled event up to it, when given: an id below ``after`` may commit
    after it (two writers), and that one its client cannot have, if the replay does not
    find it. The replay takes the events it finds up to ``after`` unsent (``had``, the
    client's); one that comes later is sent. A stream resumed from a resume token
    (``token``) starts at its mark instead, ``got`` the ids above it the client has: every
    other event past that mark is sent, one committed since the client's last frame too."""

    def __init__(
        self,
        after: int,
        created_at: datetime,
        reaches: Callable[[str | None], bool],
        floor: int | None = None,
        got: frozenset[int] = frozenset(),
    ) -> None:
        self.mark = after if floor is None else min(floor, after)
        self.had = after
        self.replayed = False
        self.created_at = created_at
        self.reaches = reaches
        self.sent: set[int] = set(got)
        self.held: set[int] = set()  # heard live, held back unsent (``reconnect.last_frames``)
        self.gone = False
        self.ahead: list[BusEvent] = []  # read past a live event's id (``upto``), unsent

    def seen(self, event_id: int) -> bool:
        """Whether ``event_id`` was sent already, or never will be (at or below the mark)."""
        return event_id <= self.mark or event_id in self.sent

    def token(self) -> str | None:
        """What the client is to reconnect with, past what this stream sent: the highest id
        sent when it sent each one from the mark up to it, else a resume token, the mark,
        then each id sent above it less the mark, dot-separated, the lowest ``TOKEN_IDS`` of
        them past that many (``None``: none sent above the mark). An id between the mark and
        the highest one sent that the stream has not sent may be one a writer has yet to
        commit (two writers), which a reconnect's replay with the highest id alone would take
        for the client's; an id sent after a higher one would have that higher one sent
        again. A token that leaves some out has the reconnect send those again, on each
        reconnect until the mark moves past them (``SETTLE_SECONDS``), and none is lost."""
        above = sorted(i for i in self.sent if i > self.mark)
        if not above:
            return None
        if above[-1] - self.mark == len(above):
            return str(above[-1])  # no gap: each id up to the highest sent
        listed = above[:TOKEN_IDS]
        return ".".join([str(self.mark), *(str(i - self.mark) for i in listed)])

    def take(self, event_id: int) -> bool:
        """True the first time ``event_id`` comes (send it), False after."""
        if self.seen(event_id):
            return False
        self.sent.add(event_id)
        self.held.discard(event_id)
        return True

    def take_live(self, event_id: int) -> bool:
        """``take`` for an event heard live, but held back behind one held already: sent
        first, its id, the client's Last-Event-ID should the stream end, would skip that."""
        if self.held and not self.seen(event_id) and event_id > min(self.held):
            self.hold(event_id)
            return False
        return self.take(event_id)

    def hold(self, event_id: int | None) -> None:
        """``event_id``, heard live, is held back unsent: a catch-up sends it."""
        if event_id is not None:
            self.sent.discard(event_id)
            self.held.add(event_id)

    def before(self, event_id: int) -> list[BusEvent]:
        """The events read ahead below ``event_id`` and not sent yet, taken; those up to
        it leave ``ahead``."""
        due = [e for e in self.ahead if e.id is not None and e.id < event_id and self.take(e.id)]
        self.ahead = [e for e in self.ahead if e.id is not None and e.id > event_id]
        return due

    async def catch_up(
        self,
        pool: Any,
        tenant: str,
        session_id: str,
        upto: int | None = None,
        shared: tuple[Reads, float | None] | None = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Read the table past ``mark``; move ``mark`` over settled rows only. The same
        statement reads the session's agent, judged before any of its rows is sent. With
        ``upto`` (a live event's id), the rows past it are kept in ``ahead``, unsent: each
        goes out in its place in the live order, after the transient events published
        before it (a reply's last deltas before its ``context.usage``). With ``shared``
        (the session's ``catch_up.Reads`` and the moment the read is due, None for a read
        that must hold ``upto``), the rows come from a read the session's streams share."""
        settled, self.ahead = True, []
        if shared is None:
            # this stream's own read (the replay as it opens)
            pages = catch_up.pages(
                pool, tenant, session_id, self.created_at, self.mark, SETTLE_SECONDS
            )
        else:
            reads, since = shared
            holding = None if since is not None else upto
            shared_pages = await reads.read(self, SETTLE_SECONDS, since=since, holding=holding)
            pages = catch_up.each(shared_pages)
        async for read in pages:
            if read is None or not self.reaches(read[0]):
                self.gone = True
                return
            for r in read[1]:
                if r["id"] <= self.mark:  # a shared read starts at the lowest stream's mark
                    continue
                if upto is not None and r["id"] > upto:
                    settled = False  # the mark stays below what is not sent
                    self.ahead.append(BusEvent(r["name"], r["data"], r["id"]))
                    continue
                fresh = self.take(r["id"]) and (self.replayed or r["id"] > self.had)
                settled = settled and r["settled"]
                if settled:  # below the mark: no longer kept in ``sent``
                    self.mark = r["id"]
                    self.sent.discard(r["id"])
                if fresh:
                    yield frame(BusEvent(r["name"], r["data"], r["id"]))
        self.sent = {i for i in self.sent if i > self.mark}
        self.held = {i for i in self.held if i > self.mark}
        self.replayed = True
