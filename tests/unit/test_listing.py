"""``proxy.listing``: a list's page and its ``has_more`` from one row read past it."""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from proxy.listing import (
    BadCursor,
    page_of,
    read_row_cursor,
    read_session_cursor,
    rows_to_read,
    session_cursor,
)


def test_one_row_more_is_read_and_cut_off_again() -> None:
    assert rows_to_read(2) == 3
    assert page_of([1, 2, 3], 2) == ([1, 2], True)
    assert page_of([1, 2], 2) == ([1, 2], False)
    assert page_of([], 2) == ([], False)


def test_no_limit_reads_every_row_and_has_no_more() -> None:
    assert rows_to_read(None) is None
    assert page_of((1, 2, 3), None) == ([1, 2, 3], False)


def _crafted(place: list[object]) -> str:
    raw = json.dumps(place).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_a_session_cursor_gives_back_its_place_to_the_microsecond() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert read_session_cursor(session_cursor(at, "s-1")) == (at, "s-1")


@pytest.mark.parametrize(
    "place",
    [
        # a time PostgreSQL's driver cannot send: its UTC is past year 9999 or before year 1
        ["9999-12-31T23:59:59.999999-14:00", "s"],
        ["0001-01-01T00:00:00+14:00", "s"],
        # an id no text column takes: a lone surrogate has no UTF-8
        ["2026-01-02T03:04:05+00:00", "\ud800"],
    ],
)
def test_a_session_cursor_no_page_could_give_is_bad(place: list[object]) -> None:
    """Each was the driver's error, a 500, rather than the 400 naming ``cursor``."""
    with pytest.raises(BadCursor):
        read_session_cursor(_crafted(place))


def _at_depth(frames: int, call: Callable[[], object]) -> object:
    return call() if frames == 0 else _at_depth(frames - 1, call)


def test_a_cursor_nested_past_the_parsers_depth_is_bad_however_deep_the_caller() -> None:
    """JSON arrays nested 750 deep (the most a 1000-character cursor holds) take 750 of the
    interpreter's recursion depth to parse: a request whose stack is deep (more middleware,
    tracing) ran out of it, a RecursionError and a 500 rather than the 400 naming cursor."""
    nested = base64.urlsafe_b64encode(b"[" * 750).decode()
    for read in (read_session_cursor, functools.partial(read_row_cursor, "facts")):
        with pytest.raises(BadCursor):
            _at_depth(300, functools.partial(read, nested))
