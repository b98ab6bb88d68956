"""Query parameters of Cascade's own APIs, where an empty value is the parameter unset.

``?offset=`` with nothing after it is what a form, or a script filling a template
(``?offset=$NEXT``), sends when it has no value; it reads as the default, as an empty
``CASCADE_*`` variable does, rather than a 400 for a parameter the caller did not mean to set.
A value that is there and wrong (``?offset=abc``, ``?offset=%20``) is still the 400 naming it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BeforeValidator
from pydantic_core import PydanticUseDefault

__all__ = ["BLANK_IS_UNSET"]


def _blank_is_unset(value: Any) -> Any:
    if value == "":
        raise PydanticUseDefault()
    return value


BLANK_IS_UNSET = BeforeValidator(_blank_is_unset)
"""Metadata for ``Annotated[int, Query(...), BLANK_IS_UNSET] = default``: an empty value
takes ``default``. It goes after ``Query`` in the annotation, with the default after ``=``:
as ``Query(default)`` the validator is not applied."""
