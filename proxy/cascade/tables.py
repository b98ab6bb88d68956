"""JSON with its arrays of objects written as tables: the keys once, then a row per object.

A tool that returns records (browser elements, search hits, database rows) repeats every key
in every object; written once as a header, the keys stop costing tokens per row. This is one
of the lossless ingest transforms (``lossless.py``): the original is spilled byte for byte,
and the text the model reads is exact about every value:

- an array of at least ``MIN_ROWS`` objects becomes a block
  ``[#table ["k1","k2"] (one row per object; ~ = key absent)``, then one JSON array per object
  on its own line, then ``]``. A cell is the value as JSON, or ``~`` when that object has no
  such key (never confused with ``null``);
- it is done only when every object has each key once and its keys in the header's order
  (the union of keys in the order they first appear), so the header says the order too;
- numbers and constants are kept as written (``1.10``, ``1e400``); strings are written as
  JSON, so an escape may read differently (``\\u00e9`` as ``é``) but never the value;
- the rest is minified JSON; a cell is never a table (each row stays one line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from json.encoder import encode_basestring
from typing import Any

__all__ = ["MIN_ROWS", "ABSENT", "parse_json", "may_tabulate", "tabulate_value", "tabulate_json"]

MIN_ROWS = 3
"""An array of fewer objects is left as it is: a header would not pay for itself."""

ABSENT = "~"


class _Raw(str):
    """A number or constant token exactly as written."""


class _Obj(list[tuple[str, Any]]):
    """An object's (key, value) pairs, in order, duplicates kept."""


def parse_json(text: str) -> Any:
    """``text`` parsed with its objects as ordered pairs (duplicates kept) and its numbers and
    constants as written; raises ``ValueError`` (not JSON) or ``RecursionError`` (too deep).
    ``lossless.compact_text`` parses a result once with it, for both its checks and the
    tables."""
    return json.loads(
        text, object_pairs_hook=_Obj, parse_float=_Raw, parse_int=_Raw, parse_constant=_Raw
    )


_OBJECT_IN_ARRAY = re.compile(r"\[[ \t\n\r]*\{")


def may_tabulate(text: str) -> bool:
    """Whether the JSON ``text`` may hold an array of objects: an array opening on an object
    (``[{``, whitespace between allowed) somewhere, perhaps inside a string. When not, no
    table can be made and ``tabulate_value`` need not walk the value."""
    return _OBJECT_IN_ARRAY.search(text) is not None


def _columns(items: Sequence[Any]) -> list[str] | None:
    """The header for ``items`` when they can be a table, else None."""
    if len(items) < MIN_ROWS or not all(isinstance(x, _Obj) and x for x in items):
        return None
    order: dict[str, int] = {}
    for obj in items:
        for key, _ in obj:
            order.setdefault(key, len(order))
    for obj in items:
        at = [order[key] for key, _ in obj]
        if len(set(at)) != len(at) or at != sorted(at):
            return None
    return list(order)


_key = encode_basestring
"""A string as JSON with non-ASCII kept (``json.dumps(s, ensure_ascii=False)``), called
directly: ``dumps`` builds an encoder on each call with that option."""

_CONSTANTS = {True: "true", False: "false", None: "null"}


def _emit(value: Any, tables: list[int], *, flat: bool = False) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, str):
        return _key(value)
    if value is True or value is False or value is None:
        return _CONSTANTS[value]
    if isinstance(value, _Obj):
        return "{" + ",".join(f"{_key(k)}:{_emit(v, tables, flat=flat)}" for k, v in value) + "}"
    columns = None if flat else _columns(value)
    if columns is None:
        return "[" + ",".join(_emit(v, tables, flat=flat) for v in value) + "]"
    tables.append(len(value))
    header = "[" + ",".join(_key(c) for c in columns) + "]"
    lines = [f"[#table {header} (one row per object; {ABSENT} = key absent)"]
    for obj in value:
        cells = dict(obj)
        row = [_emit(cells[c], tables, flat=True) if c in cells else ABSENT for c in columns]
        lines.append("[" + ",".join(row) + "]")
    lines.append("]")
    return "\n".join(lines)


def tabulate_json(text: str) -> tuple[str, int] | None:
    """``text`` (a JSON object or array) with its arrays of objects as tables, and how many
    tables; None when it is not JSON, holds no such array, or is not made shorter."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = parse_json(stripped)
    except (ValueError, RecursionError):
        return None
    return tabulate_value(value, len(stripped))


def tabulate_value(value: Any, length: int) -> tuple[str, int] | None:
    """``tabulate_json`` of an already parsed value (``parse_json``) whose JSON text is
    ``length`` characters long without its surrounding whitespace."""
    tables: list[int] = []
    try:
        out = _emit(value, tables)
        out.encode("utf-8")  # a lone surrogate in a string: leave the text as it is
    except (RecursionError, UnicodeEncodeError):
        return None
    if not tables or len(out) >= length:
        return None
    return out, len(tables)
