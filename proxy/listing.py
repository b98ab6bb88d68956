"""A list's page as every list of the API gives it: at most ``limit`` rows, and ``has_more``,
as OpenAI's lists say it, when a row is past the page. One row more than the page holds is
read to know (``rows_to_read``) and cut off again (``page_of``): no second query counts the
rest. A stored time is shown as ISO 8601 text (``iso_time``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar, overload

__all__ = ["iso_time", "page_of", "rows_to_read"]

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
