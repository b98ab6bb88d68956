"""The id an event stream starts after: ``Last-Event-ID``, or ``?last_event_id=`` for a
client that cannot send the header (``api/events.py``), and their OpenAPI parameters. Either
is an event id or a resume token a stream sent (``event_cursor.Cursor.token``): its mark,
then each id above it the client has, less the mark, dot-separated."""

from __future__ import annotations

from fastapi import Request

from proxy.api.deps import BIGINT_MAX
from proxy.api.event_cursor import TOKEN_IDS
from proxy.errors import ClientRequestError

__all__ = ["LAST_EVENT_ID", "LAST_EVENT_ID_QUERY", "TOKEN_CHARS", "after"]

TOKEN_CHARS = 1500
"""The longest resume token taken: ``event_cursor.TOKEN_IDS`` ids, each at most 19 digits
(a bigint) and a dot; one listing more ids than that is refused too, never one a stream
sends."""

LAST_EVENT_ID = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "description": "The id of the last event received, or the resume token the stream sent "
    "after it: the stream starts after it.",
    "schema": {"type": "string", "pattern": "^([0-9]+(\\.[0-9]+)*)?$"},
}
LAST_EVENT_ID_QUERY = {**LAST_EVENT_ID, "in": "query", "name": "last_event_id"} | {
    "description": "Last-Event-ID for a client that cannot send the header (the header wins)."
}


def after(request: Request) -> tuple[int, frozenset[int]]:
    """The id of the last event the client has (``Last-Event-ID``, else ``?last_event_id=``)
    and no others; 0, every event, when it sends none or an empty one. For a resume token,
    its mark and the ids above it the client has. Anything else is refused: replaying every
    event would answer a mangled id with a duplicate history."""
    param, value = "Last-Event-ID", request.headers.get("last-event-id")
    if not value:
        param, value = "last_event_id", request.query_params.get("last_event_id")
    if not value:
        return 0, frozenset()
    parts = value.split(".") if len(value) <= TOKEN_CHARS else [value]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise ClientRequestError(
            f"{param} {value[:30]!r} is not an event id: send the id of the last event "
            "received (digits), or the resume token the stream sent after it (its mark, then "
            "offsets from it, joined by dots: 40.2.5), or none to receive every event",
            param=param,
            log_message=f"{param} is not an event id",  # a header's or a query's value
        )
    mark = _id(param, parts[0])
    got = frozenset(mark + _id(param, p) for p in parts[1:])
    if len(parts) > TOKEN_IDS + 1 or any(i == mark or i > BIGINT_MAX for i in got):
        raise ClientRequestError(
            f"{param} {value[:30]!r} is not a resume token",
            param=param,
            log_message=f"{param} is not a resume token",
        )
    return mark, got


def _id(param: str, digits: str) -> int:
    digits = digits.lstrip("0") or "0"  # int() refuses a string past 4300 digits
    if len(digits) > len(str(BIGINT_MAX)) or int(digits) > BIGINT_MAX:
        raise ClientRequestError(
            f"{param} {digits[:30]} is past any event id",
            param=param,
            log_message=f"{param} is past any event id",
        )
    return int(digits)
