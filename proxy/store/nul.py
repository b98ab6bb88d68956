"""Text with NUL characters, stored in columns that refuse them.

PostgreSQL's text values cannot hold 0x00, and jsonb strings refuse ``\\u0000``. A client
sends NULs as ordinary data (a tool result that is ``cat`` of a binary file, an id a tool
made up), so every text the store takes from a client goes through :func:`encode`, and
comes back through :func:`decode`, exactly as it was sent.

The escape starts with U+FFFF, a Unicode noncharacter (reserved for a program's internal
use, never interchanged as text). Text without NUL that does not start with U+FFFF is
stored as is, so every row stored before this module existed reads back unchanged and the
common case costs one scan for a NUL. Any other text is U+FFFF followed by the text with
each U+FFFF doubled and each NUL written as U+FFFF ``0``; a stored text starts with U+FFFF
exactly when it was escaped, so the mapping is one to one. The json column of ``messages``
keeps ``\\u0000`` escapes as they are and needs none of this.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["MARK", "encode", "decode", "encode_json", "decode_json", "needs_escape"]

MARK = "\uffff"
_ESCAPED = re.compile("\uffff([\uffff0])")


def _unescape(m: re.Match[str]) -> str:
    return "\x00" if m[1] == "0" else MARK


def needs_escape(text: str) -> bool:
    return "\x00" in text or text.startswith(MARK)


def encode(text: str) -> str:
    """``text`` as a PostgreSQL text value can hold it (see the module docstring)."""
    if not needs_escape(text):
        return text
    return MARK + text.replace(MARK, MARK + MARK).replace("\x00", MARK + "0")


def decode(stored: str) -> str:
    """The text :func:`encode` was given."""
    if not stored.startswith(MARK):
        return stored
    return _ESCAPED.sub(_unescape, stored[1:])


def _walk(value: Any, fix: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fix(value)
    if isinstance(value, Mapping):
        return {fix(k): _walk(v, fix) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, fix) for v in value]
    return value


def encode_json(value: Any) -> Any:
    """``value`` (a JSON document) with every string, keys too, through :func:`encode`: what a
    jsonb column can hold."""
    return _walk(value, encode)


def decode_json(value: Any) -> Any:
    """The document :func:`encode_json` was given."""
    return _walk(value, decode)
