"""A list's page as every list of the API gives it: at most ``limit`` rows, and ``has_more``,
as OpenAI's lists say it, when a row is past the page. One row more than the page holds is
read to know (``rows_to_read``) and cut off again (``page_of``): no second query counts the
rest. A stored time is shown as ISO 8601 text (``iso_time``). The session list and the
memory lists also page by an opaque cursor (``session_cursor``, ``row_cursor``): the place
after a row, which rows coming to the front of a list or leaving it do not move, as they move
an offset. Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, overload

__all__ = [
    "FACTS",
    "SUGGESTIONS",
    "BadCursor",
    "iso_time",
    "page_of",
    "read_row_cursor",
    "read_session_cursor",
    "row_cursor",
    "rows_to_read",
    "session_cursor",
]

T = TypeVar("T")


@overload
def rows_to_read(limit: int) -> int: ...
@overload
def rows_to_read(limit: None) -> None: ...
@overload
def rows_to_read(limit: int | None) -> int | None: ...
def rows_to_read(limit: int | None) -> int | None:
    """The rows to read for a page of ``limit`` (None: every row): one more, to know whether
    any is past it."""
    return None if limit is None else limit + 1


def page_of(rows: Sequence[T], limit: int | None) -> tuple[list[T], bool]:
    """The page in ``rows`` (read as ``rows_to_read`` says), and whether a row is past it."""
    if limit is None:
        return list(rows), False
    return list(rows[:limit]), len(rows) > limit


def iso_time(value: Any) -> Any:
    """A stored time (a ``datetime``) as a list's item shows it, ISO 8601 text; anything
    else (None) as it is."""
    return value.isoformat() if hasattr(value, "isoformat") else value


class BadCursor(ValueError):
    """A ``cursor`` no list page gave: not one this module wrote."""


def session_cursor(updated_at: datetime, session_id: str) -> str:
    """The place after a session row in the list's order (latest activity first, then id),
    as URL-safe text a client passes back unread: its time and id, which a session made or
    used since does not change, where an offset counts the rows before it."""
    return _cursor([updated_at.isoformat(), session_id])


def _cursor(place: list[Any]) -> str:
    raw = json.dumps(place, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _place(cursor: str) -> Any:
    """What ``_cursor`` wrote into ``cursor``, a flat list; ``BadCursor`` for text that is
    no JSON, and for JSON nested deep enough to run the parser out of recursion depth
    (no cursor nests)."""
    try:
        return json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, RecursionError) as exc:
        raise BadCursor(cursor) from exc


def read_session_cursor(cursor: str) -> tuple[datetime, str]:
    """The (time, id) ``session_cursor`` wrote into ``cursor``; ``BadCursor`` for any other
    text, so a mangled cursor is the client's 400 and never a query on a made-up place."""
    try:
        at, session_id = _place(cursor)
        when = datetime.fromisoformat(at)
        # the driver sends the time in UTC and the id as UTF-8: one neither takes (a UTC
        # time past year 9999, a lone surrogate) is no row's place, and was its 500
        when.astimezone(UTC)
        session_id.encode()
    except (binascii.Error, ValueError, TypeError, AttributeError, OverflowError) as exc:
        raise BadCursor(cursor) from exc
    if when.tzinfo is None or not isinstance(session_id, str) or "\x00" in session_id:
        raise BadCursor(cursor)
    return when, session_id


def row_cursor(kind: str, row_id: int) -> str:
    """The place after a row of a list kept in the order of its rows' ids (a scope's facts,
    the pending suggestions), which rows leaving the list (deleted, answered) do not move;
    ``kind`` names the list, whose ids are its own sequence's and no other list's place."""
    return _cursor([kind, row_id])


def read_row_cursor(kind: str, cursor: str) -> int:
    """The id ``row_cursor`` wrote into ``cursor`` for the ``kind`` list; ``BadCursor`` for
    any other text, another list's cursor too."""
    place = _place(cursor)
    if not (isinstance(place, list) and len(place) == 2 and place[0] == kind):
        raise BadCursor(cursor)
    if type(place[1]) is not int or not 0 <= place[1] <= _BIGINT_MAX:
        raise BadCursor(cursor)
    return place[1]


FACTS = "fact"
"""The ``kind`` of a scope's facts' row cursors."""
SUGGESTIONS = "suggestion"
"""The ``kind`` of the pending suggestions' row cursors."""

_BIGINT_MAX = 2**63 - 1
