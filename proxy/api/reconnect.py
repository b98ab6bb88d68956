"""The ``retry:`` an event stream's last frame carries when the bus ends it for a new
listener (``bus.RELISTENED``): every open stream on the replica ends in the same instant,
and clients that reconnect after the stream's ``retry`` (an ``EventSource``, the console)
would all come back in that instant too, each reconnect a few statements on the pool (the
session and where it resumes, the replay, the registration). Each stream is told a time of its
own, spread over :data:`SPREAD_MS` past :data:`FIRST_MS`.

The times follow the golden ratio's sequence from a random start (``Spread``): any two
streams ended one after the other are told times far apart, every run of them covers the
span evenly, and two replicas' streams do not fall on the same times.

A stream may hold back an event heard live (its read met an outage), and the later ones
behind it, for a catch-up to send; but an earlier id committed after a later one was sent
(two writers) can be held back behind it. Ended before that catch-up, its client's
Last-Event-ID, the last id it received, would be past the held event, and the reconnect's
replay would skip it for good; so such a stream reads the table once more before its last
frame (:func:`last_frames`).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

__all__ = ["FIRST_MS", "SPREAD_MS", "Spread", "frame", "last_frames"]

FIRST_MS = 1000
"""The earliest reconnect a stream ended for a new listener is told (milliseconds)."""

SPREAD_MS = 5000
"""The span past :data:`FIRST_MS` over which those reconnects are spread (milliseconds)."""

_STEP = (5**0.5 - 1) / 2  # the golden ratio's fraction: consecutive times stay far apart


class Spread:
    """Each call a reconnect time in ``[first, first + span)`` milliseconds, the next one
    at least about 38% of ``span`` from the last."""

    def __init__(self, first: int = FIRST_MS, span: int = SPREAD_MS) -> None:
        self.first, self.span = first, span
        self._at = random.random()

    def __call__(self) -> int:
        self._at = (self._at + _STEP) % 1.0
        return self.first + int(self._at * self.span)


_SPREAD = Spread()


def frame() -> dict[str, Any]:
    """The frame that ends a stream for a new listener: a comment, and the stream's
    ``retry`` (no ``id``: the client's Last-Event-ID stays the last id it received, an
    event's or a resume token's)."""
    return {"comment": "reconnect", "retry": _SPREAD()}


class _Cursor(Protocol):
    mark: int
    sent: set[int]
    held: set[int]
    gone: bool

    def token(self) -> str | None: ...


async def last_frames(
    cursor: _Cursor, read: Callable[[], AsyncIterator[dict[str, Any]]]
) -> AsyncIterator[dict[str, Any]]:
    """The frames that end a stream for a new listener: with events held back (``held``),
    what a ``read`` past the stream's ``mark`` finds, then :func:`frame` with the ``id`` to
    resume after, the highest sent (the read sent the held ones, after later ones); a read
    that failed leaves the stream's ``mark``, below every event it may not have sent, so
    the replay sends them, and those sent above it again. A stream that sent ids above an
    unsent one names its resume token instead (``event_cursor.Cursor.token``). None once
    the read found the session gone: the reconnect says so."""
    if not cursor.held:
        yield frame()
        return
    try:
        async for sent in read():
            yield sent
    except Exception:  # noqa: BLE001 - an outage among them: the mark is safe
        pass
    if cursor.gone:
        return
    end = frame()
    resume = None if cursor.held else cursor.token()
    end["id"] = resume or str(cursor.mark if cursor.held else max(cursor.sent, default=cursor.mark))
    yield end
