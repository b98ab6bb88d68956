"""Fast JSON for the hot path: orjson, falling back to the stdlib for what orjson refuses.

orjson parses and writes several times faster than ``json``; the proxy parses every request
body and writes every upstream body. It writes no integer beyond 64 bits and reads one as a
float, and a client may legitimately put one in a pass-through field: writes fall back to
``json``, and a client's body holding one is read again by ``json`` (``loads_exact``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

__all__ = [
    "HELD_CONTAINER",
    "MAX_BODY_VALUES",
    "MAX_FIELD_DEPTH",
    "TooDeep",
    "blank_escapes",
    "dumps",
    "exact_fields",
    "dumps_sorted",
    "held",
    "loads",
    "loads_exact",
    "loads_json",
    "storable",
    "structure",
    "values_count",
    "values_in",
]

loads = orjson.loads

_WIDE = float(2**63)  # orjson holds integers in 64 bits: from here on it may give a float


def loads_exact(data: bytes) -> Any:
    """``loads`` for a client's body, whose fields beside ``messages`` go upstream as they
    came: orjson reads an integer beyond 64 bits (a JSON schema's bound) as a float, so a
    body whose fields hold a float that wide is read again by ``json``, which keeps the
    integer exact. ``messages`` is not searched (its texts are strings, and walking a long
    history costs every request); a wide float there stays orjson's. A lone surrogate
    escape, high or low (the half of a reply's character the provider sent, resent), is
    read as U+FFFD, as the stored reply holds it (``storable``), so the history extends;
    orjson refuses it. A low one ``surrogateescape`` wrote for a byte that is no UTF-8 reads
    the same: as a stream's invalid byte does (README, Streaming)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        said = str(exc)
        # a lone escape ("no low surrogate", "invalid high surrogate"); bytes that are no
        # UTF-8 ("surrogates not allowed" among them) stay refused
        if "low surrogate" not in said and "high surrogate" not in said:
            raise
        return storable(loads_json(data))
    return exact_fields(obj, data)


def exact_fields(obj: Any, data: bytes) -> Any:
    """``obj`` (orjson's parse of ``data``) as ``loads_exact`` answers it: read again by
    ``json`` when a field beside ``messages`` holds a float as wide as an integer orjson
    cannot hold, ``TooDeep`` for one nested past ``MAX_FIELD_DEPTH``."""
    if isinstance(obj, dict):
        rest = [v for k, v in obj.items() if k != "messages"]
        # orjson writes every float of 1e16 or more with an exponent ("e+"): the written
        # fields are searched for the rare "+" (a memchr), and only a body with an
        # exponent is walked to be sure
        try:
            written = orjson.dumps(rest)
        except orjson.JSONEncodeError:  # nested past the 254 levels orjson writes
            for name, value in obj.items():
                if name != "messages" and _depth(value) > MAX_FIELD_DEPTH:
                    why = f"{name!r} nests past {MAX_FIELD_DEPTH} levels"
                    raise TooDeep(why, name) from None
            written = b"e+"  # not written: walked for a wide float below instead
        if b"+" in written and b"e+" in written and _wide(rest):
            return loads_json(data)
    return obj


MAX_FIELD_DEPTH = 512
"""How deep a client's field beside ``messages`` may nest: orjson reads 1024 levels and
writes 254, and a field past that goes upstream through ``json``, whose recursion takes
about 1000 less the stack of the request handling it; a deeper one is the client's 400.
A message's content is held to the same (``history.chain``)."""


MAX_BODY_VALUES = 1_000_000
"""How many JSON values (arrays, objects and the items in them) a client's chat or
embeddings body may hold: parsed, each is a Python object of tens of bytes where the body
can spend two on it (``0,``), so a body of tiny items holds many times its size
(docs/perf.md), where one of text holds about its size. A message is a few values (its
object, role and content; a tool call about six more), so a million takes a history of
well over 100,000 messages; an embeddings batch the provider takes (OpenAI: 2048 inputs,
300k tokens in all) holds about a third of it."""

_OTHERS = bytes(set(range(256)) - set(b",[{"))
_SLICE = 1 << 20  # bytes split at a time: a slice's pieces are all that is held at once


def structure(data: bytes) -> int:
    """How many commas, ``[`` and ``{`` ``data`` holds: one pass, where a count is one each."""
    return len(data.translate(None, _OTHERS))


def values_count(data: bytes, limit: int) -> int:
    """How many values ``data`` holds, counted in the bytes before anything is parsed: a
    count no more than ``limit`` is at least theirs (a bound), one past it says they are
    past it. Every value but the outermost is an item of an array or object that is not
    empty, and each such one holds one item more than its commas: outside strings, commas
    and ``[``/``{`` less the empty ``[]``/``{}``, plus one, is the count (or a few more,
    where a slice's edge parts an empty pair). A body of no more bytes than ``limit`` is not
    read at all (its length is the bound), and one with fewer commas and brackets in all is
    read once per byte: only a body past that has its strings (a pasted file's brackets, a
    text's commas) skipped to count again (``values_in``). At least half its strings are
    values (a key has a value beside it), so one of more than four quotes per value allowed
    is past without that."""
    if len(data) <= limit:
        return len(data)
    total = structure(data)
    if total < limit:
        return total + 1
    if b"\\" in data:
        data = blank_escapes(data)
    strings = data.count(b'"') // 2
    if strings // 2 > limit:
        return strings // 2
    return 1 + values_in(data, blanked=True)


def values_in(data: bytes, *, blanked: bool = False) -> int:
    """The values in ``data`` (JSON that starts and ends outside any string: a run of
    ``, value`` items, or a whole document less its outermost value), counted as
    ``values_count`` counts them. Its escapes are blanked first, unless ``blanked`` says
    they are, so that the quotes left alternate in and out of strings; it is split 1 MiB
    at a time."""
    if not blanked and b"\\" in data:
        data = blank_escapes(data)
    count, inside = 0, False
    for start in range(0, len(data), _SLICE):
        pieces = data[start : start + _SLICE].split(b'"')
        outside = b'"'.join(pieces[int(inside) :: 2])  # joined so no "[" "]" pair up
        count += structure(outside) - outside.count(b"[]") - outside.count(b"{}")
        inside ^= len(pieces) % 2 == 0
    return count


def blank_escapes(data: bytes) -> bytes:
    """``data`` with each escaped backslash and quote made two plain bytes."""
    return data.replace(b"\\\\", b"__").replace(b'\\"', b"__")


HELD_CONTAINER = 64
"""What ``held`` counts an array or object as, in characters: parsed, one holds tens of
bytes where its JSON can spend two (``[]``)."""


def held(value: Any) -> int:
    """About how many characters' worth a parsed ``value`` (a message) holds, for a cache
    bounded by characters: its strings' characters, and each array and object in it
    (content parts, tool calls, a client's own field) as ``HELD_CONTAINER``, so that a
    message of tiny items is not held at many times its weight. An object's values beside
    strings are weighed by their JSON at orjson's C speed (a cold history is weighed message
    by message), brackets in their strings counted too; what orjson refuses is walked."""
    if type(value) is not dict:
        return _walked(value)
    total = 0
    for item in value.values():
        if type(item) is str:
            total += len(item)
        elif type(item) is dict or type(item) is list:
            try:
                written = orjson.dumps(item)
            except orjson.JSONEncodeError:  # an integer past 64 bits, a deep nesting
                total += _walked(item)
            else:
                total += len(written)
                total += HELD_CONTAINER * (written.count(b"[") + written.count(b"{"))
    return total


def _walked(value: Any) -> int:
    """``held`` of ``value`` by a walk, without recursion."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict | list):
            total += HELD_CONTAINER
            stack.extend(item.values() if isinstance(item, dict) else item)
    return total


def _depth(value: Any) -> int:
    """How many levels of arrays and objects ``value`` nests, walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            stack.extend(
                (v, level + 1) for v in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def storable(value: Any) -> Any:
    """``value`` (a reply, or any part of one) with every string UTF-8 can carry: surrogate
    halves that make a pair are joined, a half with no partner becomes U+FFFD, since no
    store, hash or upstream body can hold it (JSON's grammar lets a provider send one).
    Walked without recursion: an answer nests as deep as the JSON reader takes."""
    top = [value]
    stack: list[tuple[Any, Any, Any]] = [(top, 0, value)]  # (where it goes, its key, it)
    while stack:
        into, key, item = stack.pop()
        if isinstance(item, str):
            into[key] = _utf8(item)
        elif isinstance(item, dict):
            pairs = [(_utf8(k) if isinstance(k, str) else k, v) for k, v in item.items()]
            into[key] = obj = dict(pairs)
            stack.extend((obj, k, v) for k, v in reversed(pairs))  # a repeated key: the last
        elif isinstance(item, list):
            into[key] = entries = list(item)
            stack.extend((entries, pos, v) for pos, v in enumerate(item))
    return top[0]


def _utf8(text: str) -> str:
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def _wide(value: Any) -> bool:
    """Whether ``value`` holds a float of 2**63 or more in magnitude, at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if abs(item) >= _WIDE:
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def loads_json(data: bytes, *, constants: bool = False) -> Any:
    """``data`` read by ``json``: what orjson refuses and JSON's grammar allows (a lone
    surrogate escape). ``NaN`` and ``Infinity`` only with ``constants``, which also let a
    number too large for a float (``1e400``) read as infinity; without them it is refused,
    as orjson refuses it. A nesting past what Python's recursion allows is a ``ValueError``,
    as orjson's depth limit is."""
    try:
        if constants:
            return json.loads(data)
        return json.loads(data, parse_constant=_refuse, parse_float=_finite)
    except RecursionError as exc:
        raise ValueError("the JSON nests too deep") from exc


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is no JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:40]} is infinity when read as a float")
    return value


def dumps(obj: Any) -> bytes:
    """``obj`` as JSON; what orjson refuses is written by ``json``: an integer beyond 64 bits,
    and a lone surrogate half (a provider's, in an answer the proxy rewrites), as the escape
    it came as, since no UTF-8 can carry it."""
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(obj, separators=(",", ":")).encode()


class TooDeep(ValueError):
    """A client's value nested past ``MAX_FIELD_DEPTH``: the client's 400, not the stack's;
    ``field`` names the body's field when the value is one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def dumps_sorted(obj: Any, *, levels: int | None = None) -> bytes:
    """Deterministic: sorted keys, no spaces, raw UTF-8 (what the hash chain hashes). With
    ``levels``, an ``obj`` nested deeper is ``TooDeep``, looked at only when orjson, which
    writes 254, refuses it, so the bound is the same whatever stack ``json`` has left."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        if levels is not None and _depth(obj) > levels:
            raise TooDeep(f"nests past {MAX_FIELD_DEPTH} levels") from None
        return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
