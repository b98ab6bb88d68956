"""The payloads the event bus NOTIFYs: an event stamped with its session and time, as JSON
that fits PostgreSQL's limit on one notification (8000 bytes).

A step's events are parted here into rows to persist, which a statement the request runs
anyway inserts (the table's trigger announces them), and ready payloads of transient ones.
A transient event too big for one payload keeps its name, stamp and figures, its lists
dropped (``truncated``), or, for a text that matters whole (a reply's delta), goes out in
consecutive parts that each fit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from proxy.cascade.types import TRANSIENT_EVENTS, Event
from proxy.store.events import EventRows

__all__ = [
    "LAGGED",
    "MAX_PAYLOAD",
    "RELISTENED",
    "SESSION_GONE",
    "BusEvent",
    "pieces",
    "split",
    "stamp_now",
    "transient_payload",
]


@dataclass(frozen=True, slots=True)
class BusEvent:
    """What the bus hands a subscriber: an event (``id`` a persisted one's), or one of the
    markers below, told by identity, that end its stream."""

    name: str
    data: Mapping[str, Any]
    id: int | None = None


SESSION_GONE = BusEvent("", {})
"""Handed to a session's subscribers when the session was deleted: the end of their stream."""

LAGGED = BusEvent("", {})
"""All a subscriber's queue holds once it fell ``bus.MAX_QUEUED`` events behind: the end of
its stream, whose client reconnects with Last-Event-ID and replays what it missed."""

RELISTENED = BusEvent("", {})
"""Handed to every subscriber once the listener listens again after it lost its connection
(unless it LISTENs through a transaction pooler, where it hears nothing anyway): a
notification sent meanwhile reached none of them, a transient event's (``session.reset``,
``context.evicted``) for good. The end of its stream: the client's reconnect replays the
persisted events and, past ``: live``, reads afresh what a transient one would have told."""

MAX_PAYLOAD = 7800
"""The most bytes a payload takes: NOTIFY's 8000, less a margin."""


def stamp_now() -> str:
    """The time an event is stamped with (its ``ts``)."""
    return datetime.now(UTC).isoformat()


def split(tenant: str, session_id: str, events: Sequence[Event]) -> tuple[EventRows, list[str]]:
    """(names, bodies) to persist, in order, and ready NOTIFY payloads of transient ones.

    Callers embed the persisted rows in a statement they run anyway
    (``store.events_cte``); stamping ``session_id`` and ``ts`` happens here.
    """
    if not events:  # most steps: no clock read, no lists
        return ((), ()), []
    ts = stamp_now()
    names: list[str] = []
    bodies: list[Mapping[str, Any]] = []
    transient: list[str] = []
    for event in events:
        body = {**event.data, "session_id": session_id, "ts": ts}
        if event.name in TRANSIENT_EVENTS:
            transient.append(transient_payload(tenant, session_id, event.name, body))
        else:
            names.append(event.name)
            bodies.append(body)
    return (names, bodies), transient


def pieces(
    tenant: str, session_id: str, name: str, data: Mapping[str, Any], text_key: str
) -> list[str]:
    """NOTIFY payloads of a transient event whose string ``data[text_key]`` may be too
    long for one: the text is cut into consecutive pieces that fit, one event each, with
    ``part`` and ``parts`` (which also keep equal pieces apart: NOTIFY drops a payload
    equal to one already sent in the same transaction)."""
    body = {**data, "session_id": session_id, "ts": stamp_now()}
    text = body.pop(text_key)
    envelope = len(transient_payload(tenant, session_id, name, body))
    room = MAX_PAYLOAD - envelope - len(text_key) - 8  # `, "key": ""`
    if len(json.dumps(text)) - 2 <= room:
        return [transient_payload(tenant, session_id, name, {**body, text_key: text})]
    parts = _cut(text, room - 40)  # `, "part": n, "parts": n`
    return [
        transient_payload(
            tenant, session_id, name, {**body, text_key: t, "part": i, "parts": len(parts)}
        )
        for i, t in enumerate(parts)
    ]


_FIGURE_CHARS = 200
"""The longest string a transient event too big for one payload keeps (``transient_payload``)."""


def transient_payload(tenant: str, session_id: str, name: str, body: Mapping[str, Any]) -> str:
    """A transient event's NOTIFY payload. One too big to fit keeps its stamp and its
    figures (numbers, flags, short strings: an eviction's ``count`` and ``tokens_reclaimed``)
    and drops the rest (its lists of results), marked ``truncated``; its stamp only if even
    that does not fit."""
    payload = json.dumps({"t": tenant, "s": session_id, "n": name, "i": None, "d": body})
    if len(payload.encode()) <= MAX_PAYLOAD:
        return payload
    stamp = {"session_id": session_id, "ts": body["ts"], "truncated": True}
    figures = {k: v for k, v in body.items() if _figure(v)} | stamp
    for small in (figures, stamp):
        payload = json.dumps({"t": tenant, "s": session_id, "n": name, "i": None, "d": small})
        if len(payload.encode()) <= MAX_PAYLOAD:
            break
    return payload


def _figure(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, int | float)
        or (isinstance(value, str) and len(value) <= _FIGURE_CHARS)
    )


def _cut(text: str, room: int) -> list[str]:
    """``text`` in consecutive parts whose JSON string form (escapes and all) fits ``room``."""
    parts = []
    while text:
        size = min(len(text), room)
        while (escaped := len(json.dumps(text[:size])) - 2) > room:
            size = max(1, min(size - 1, size * room // escaped))
        parts.append(text[:size])
        text = text[size:]
    return parts
