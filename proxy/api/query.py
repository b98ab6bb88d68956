"""Query parameters of Cascade's own APIs, where an empty value is the parameter unset and an
integer is written as one.

``?offset=`` with nothing after it is what a form, or a script filling a template
(``?offset=$NEXT``), sends when it has no value; it reads as the default, as an empty
``CASCADE_*`` variable does, rather than a 400 for a parameter the caller did not mean to set.
A value that is there and wrong (``?offset=abc``, ``?offset=%20``) is still the 400 naming it.

An integer parameter takes decimal digits, with a ``-`` for a negative one (which its bounds
then refuse by name). Pydantic's lax parsing would read ``1.0``, ``+5``, `` 5`` and
``5_000`` as integers, and a client computing a float (``limit=len/2``) would get a page it
never asked for instead of the 400 saying what it sent is no integer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError, PydanticUseDefault

from proxy.errors import ClientRequestError
from proxy.listing import BadCursor

__all__ = ["BLANK_IS_UNSET", "CURSOR", "INTEGER", "cursor_place"]

T = TypeVar("T")

CURSOR = (
    "Where to start: a page's next_cursor, the place after its last row, which rows that "
    "came or went since do not move as they move an offset; not with offset."
)
"""The ``cursor`` parameter's description, the same on every list that takes one."""


def cursor_place(cursor: str, offset: int, read: Callable[[str], T]) -> T | None:
    """The place ``read`` finds in a list's ``cursor`` (None: none sent). A cursor with an
    offset past 0 is two starts, and text no page gave is no place: each is the 400 naming
    its parameter, never a page the client did not ask for."""
    if not cursor:
        return None
    if offset:
        raise ClientRequestError("'offset' and 'cursor' are two starts: send one", param="offset")
    try:
        return read(cursor)
    except BadCursor:
        raise ClientRequestError(
            "'cursor' is no cursor a page gave: send a page's next_cursor as it came",
            param="cursor",
        ) from None


_DIGITS = re.compile(r"-?[0-9]+")


def _blank_is_unset(value: Any) -> Any:
    if value == "":
        raise PydanticUseDefault()
    return value


def _integer(value: Any) -> Any:
    value = _blank_is_unset(value)
    if isinstance(value, str) and _DIGITS.fullmatch(value) is None:
        raise PydanticCustomError(
            "int_parsing",
            "Input should be a valid integer, unable to parse string as an integer",
        )
    return value


BLANK_IS_UNSET = BeforeValidator(_blank_is_unset)
"""Metadata for ``Annotated[str, Query(...), BLANK_IS_UNSET] = default``: an empty value
takes ``default``. It goes after ``Query`` in the annotation, with the default after ``=``:
as ``Query(default)`` the validator is not applied."""

INTEGER = BeforeValidator(_integer)
"""``BLANK_IS_UNSET`` for an integer parameter (query or path), which also refuses any text
but decimal digits (``-`` allowed), as ``Input should be a valid integer``."""
