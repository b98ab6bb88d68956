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
from typing import Any

from pydantic import BeforeValidator
from pydantic_core import PydanticCustomError, PydanticUseDefault

__all__ = ["BLANK_IS_UNSET", "INTEGER"]

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
