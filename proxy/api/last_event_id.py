"""The id an event stream starts after: ``Last-Event-ID``, or ``?last_event_id=`` for a
client that cannot send the header (``api/events.py``), and their OpenAPI parameters."""

from __future__ import annotations

from fastapi import Request

from proxy.api.deps import BIGINT_MAX
from proxy.errors import ClientRequestError

__all__ = ["LAST_EVENT_ID", "LAST_EVENT_ID_QUERY", "after"]

LAST_EVENT_ID = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "description": "The id of the last event received: the stream starts after it.",
    "schema": {"type": "string", "pattern": "^[0-9]*$"},
}
LAST_EVENT_ID_QUERY = {**LAST_EVENT_ID, "in": "query", "name": "last_event_id"} | {
    "description": "Last-Event-ID for a client that cannot send the header (the header wins)."
}


def after(request: Request) -> int:
    """The id of the last event the client has (``Last-Event-ID``, else ``?last_event_id=``);
    0, every event, when it sends none or an empty one. Anything but a plain decimal event id
    is refused: replaying every event would answer a mangled id with a duplicate history."""
    param, value = "Last-Event-ID", request.headers.get("last-event-id")
    if not value:
        param, value = "last_event_id", request.query_params.get("last_event_id")
    if not value:
        return 0
    if not (value.isascii() and value.isdigit()):
        raise ClientRequestError(
            f"{param} {value[:30]!r} is not an event id: send the id of the last event "
            "received (a number), or none to receive every event",
            param=param,
            log_message=f"{param} is not an event id",  # a header's or a query's value
        )
    digits = value.lstrip("0") or "0"  # int() refuses a string past 4300 digits
    if len(digits) > len(str(BIGINT_MAX)) or int(digits) > BIGINT_MAX:
        raise ClientRequestError(
            f"{param} {value[:30]} is past any event id",
            param=param,
            log_message=f"{param} is past any event id",
        )
    return int(digits)
