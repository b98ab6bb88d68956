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


class _Room:
    """The characters the tables' cells may still take: the JSON text's length. Each cell is
    a character at least, so tables whose cells take more cannot come out shorter than the
    text; ``_columns`` raises ``_NoRoom`` then, before they are written. Objects whose keys
    hardly repeat make as many columns as rows, nearly every cell absent, and would be
    written out cell by cell (rows times columns) before the whole was found too long."""

    def __init__(self, left: int) -> None:
        self.left = left

    def take(self, cells: int) -> None:
        self.left -= cells
        if self.left < 0:
            raise _NoRoom


class _NoRoom(Exception):
    """The tables' cells would take more than the text (``_Room``)."""


def _columns(items: Sequence[Any], room: _Room) -> tuple[tuple[str, ...], bool] | None:
    """The header for ``items`` when they can be a table, and whether every object has
    exactly its keys (the usual case: then each row is the object's values in order); None
    when they cannot be a table. Its cells are taken from ``room``."""
    if len(items) < MIN_ROWS or not all(type(x) is _Obj and x for x in items):
        return None
    first = next(zip(*items[0], strict=True))
    if all(next(zip(*obj, strict=True)) == first for obj in items):
        if len(set(first)) != len(first):
            return None
        room.take(len(first) * len(items))
        return first, True
    order: dict[str, int] = {}
    for obj in items:
        for key, _ in obj:
            order.setdefault(key, len(order))
    for obj in items:
        at = [order[key] for key, _ in obj]
        if len(set(at)) != len(at) or at != sorted(at):
            return None
    room.take(len(order) * len(items))  # a table only: an array left as JSON takes none
    return tuple(order), False


_key = encode_basestring
"""A string as JSON with non-ASCII kept (``json.dumps(s, ensure_ascii=False)``), called
directly: ``dumps`` builds an encoder on each call with that option."""

_CONSTANTS = {True: "true", False: "false", None: "null"}


def _cells(values: Sequence[Any], tables: list[int], flat: bool, room: _Room) -> list[str]:
    """Each of ``values`` as JSON (``_emit``). The parser gives exact types (``_Raw``,
    ``str``, ``_Obj``, ``list``, the constants), so each is told by ``type``, and a scalar
    is written in place, without a call."""
    out: list[str] = []
    for v in values:
        kind = type(v)
        if kind is _Raw:
            out.append(v)
        elif kind is str:
            out.append(_key(v))
        elif kind is _Obj or kind is list:
            out.append(_emit(v, tables, flat, room))
        else:
            out.append(_CONSTANTS[v])
    return out


def _emit(value: Any, tables: list[int], flat: bool, room: _Room) -> str:
    """``value`` as minified JSON with its arrays of objects as tables (none when ``flat``:
    a cell stays on its row's line), their cells taken from ``room``."""
    kind = type(value)
    if kind is _Obj:
        keys, values = zip(*value, strict=True) if value else ((), ())
        cells = _cells(values, tables, flat, room)
        return "{" + ",".join([f"{_key(k)}:{c}" for k, c in zip(keys, cells, strict=True)]) + "}"
    if kind is not list:
        return _cells((value,), tables, flat, room)[0]
    found = None if flat else _columns(value, room)
    if found is None:
        return "[" + ",".join(_cells(value, tables, flat, room)) + "]"
    columns, exact = found
    tables.append(len(value))
    header = "[" + ",".join([_key(c) for c in columns]) + "]"
    lines = [f"[#table {header} (one row per object; {ABSENT} = key absent)"]
    for obj in value:
        if exact:
            row = _cells([v for _, v in obj], tables, True, room)
        else:
            by_key = dict(obj)
            row = [_emit(by_key[c], tables, True, room) if c in by_key else ABSENT for c in columns]
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


def _may_have_table(value: Any) -> bool:
    """Whether some array in ``value`` has ``MIN_ROWS`` items and opens on an object: when
    none does, ``_emit`` writes no table, and this walk of the containers is much cheaper
    than writing the value (most arrays of objects in tool results are shorter)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is _Obj:
            stack.extend([v for _, v in node if type(v) is _Obj or type(v) is list])
        elif type(node) is list:
            if len(node) >= MIN_ROWS and type(node[0]) is _Obj:
                return True
            stack.extend([v for v in node if type(v) is _Obj or type(v) is list])
    return False


def tabulate_value(value: Any, length: int) -> tuple[str, int] | None:
    """``tabulate_json`` of an already parsed value (``parse_json``) whose JSON text is
    ``length`` characters long without its surrounding whitespace."""
    if not _may_have_table(value):
        return None
    tables: list[int] = []
    try:
        out = _emit(value, tables, False, _Room(length))
        out.encode("utf-8")  # a lone surrogate in a string: leave the text as it is
    except (RecursionError, UnicodeEncodeError, _NoRoom):
        return None
    if not tables or len(out) >= length:
        return None
    return out, len(tables)
