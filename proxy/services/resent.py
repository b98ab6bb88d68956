"""Parse a resent request body by decoding only what is new since the session's last one.

Clients resend the whole history on every request. At 5,000 messages that is about 1.6 MB
of JSON, and parsing it, comparing it with the previous history and freeing the previous
copy is most of what a long session's request costs on top of a short one (docs/perf.md).
A client that extends its history sends the same bytes as last time with new messages
spliced in before the closing ``]`` of ``messages``. So this cache keeps, per
named session, the previous body's bytes and where its last message ends, and when the new
body is those bytes plus new messages plus the same tail, it decodes only the new messages.
The prefix's messages are the very objects parsed last time, so the hash chain's comparison
of the two histories is an identity check per message (``services.chaincache``).

Soundness does not depend on the key or on any guess about the client; only on bytes:

- A *located* body ``P`` is split into ``H + ARR + T``: ``H`` ends with the top-level key
  ``"messages":`` (checked: ``H + 'null}'`` parses as an object), ``ARR`` is one complete
  array (orjson parsed it and stopped at unexpected content right after it) and ``T`` closes
  the top-level object (checked: ``'{"a":null' + T`` parses, without another ``messages``).
  ``end`` is the offset just after ``ARR``'s last element.
- A new body ``N`` takes the fast path only if ``N = P[:end] + M + P[end:]`` and ``'[null' +
  M + ']'`` parses as an array: ``M`` is then a run of ``, value`` items, and JSON's grammar
  continues after ``P[:end]`` exactly as inside that array. ``N`` therefore parses to ``P``'s
  object with the items of ``M`` appended to ``messages``, which is what the fast path
  returns (a new top-level dict and a new list; the message dicts are shared, and nothing
  on the request path mutates a client's message).

Anything else (another tail, an edited message, a different key order, a body too small to
be worth it) is a full parse plus one more pass over the messages array to
locate it for the next request. Sessions are only cached when the request names them (path
or ``X-Session-Id``): the key must be known before the body is parsed. It is only a cache,
bounded by the bytes it holds; a miss costs one extra array parse, nothing else.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from proxy.jsonio import blank_escapes, loads, loads_exact, structure, values_in

__all__ = ["ResentBodies"]

_KEY = re.compile(rb'[{,][ \t\r\n]*"messages"[ \t\r\n]*:[ \t\r\n]*\[')
_WS = b" \t\r\n"
_AFTER_DOCUMENT = "unexpected content after document"


@dataclass(frozen=True, slots=True)
class _Entry:
    raw: bytes  # the previous body
    end: int  # offset just after the last message of its messages array
    body: dict[str, Any]  # what it parsed to
    checked: int = 0  # how many leading messages of ``body`` its caller's check passed
    values: int = 0  # its commas and brackets: at least its values less one
    counted: int | None = None  # its values as its caller counted them (jsonio.values_count)


def _split(raw: bytes) -> int | None:
    """Offset just after the last element of ``raw``'s top-level ``messages`` array, or
    None when the layout cannot be proven (see the module docstring)."""
    for match in _KEY.finditer(raw):
        start = match.end() - 1  # the array's "["
        try:
            head = loads(raw[:start] + b"null}")
        except ValueError:
            continue  # a nested "messages" key: the object is not closed by one brace
        if not isinstance(head, dict):
            return None
        try:
            loads(memoryview(raw)[start:])
        except ValueError as exc:
            pos, doc = getattr(exc, "pos", None), getattr(exc, "doc", None)
            if (
                getattr(exc, "msg", None) != _AFTER_DOCUMENT
                or not isinstance(pos, int)
                or not isinstance(doc, str)
            ):
                return None
        else:
            return None  # nothing after the array: not a valid object body
        # orjson reports a character index into the decoded document, not a byte offset.
        after = start + (pos if doc.isascii() else len(doc[:pos].encode()))
        try:
            tail = loads(b'{"a":null' + raw[after:])
        except ValueError:
            return None
        if not isinstance(tail, dict) or "messages" in tail:
            return None
        close = raw.rindex(b"]", start, after)
        end = close
        while raw[end - 1] in _WS:
            end -= 1
        if end - 1 == start:
            return None  # an empty array: nothing to extend
        return end
    return None


class ResentBodies:
    """The bodies last parsed per named session, bounded by their bytes (``max_bytes``) and
    by their commas and brackets (a bound on their values; ``max_values``, by default one
    in eight of those bytes): parsed, a body of tiny items holds many times its bytes, and
    these stay held between requests. Bodies with fewer of those in their bytes (agent
    histories, whose text is most of them) are bounded by their bytes alone."""

    def __init__(
        self,
        *,
        max_bytes: int = 32 << 20,
        min_bytes: int = 8 << 10,
        max_values: int | None = None,
    ) -> None:
        self._entries: OrderedDict[Any, _Entry] = OrderedDict()
        self._size = self._values = 0
        self._max = max_bytes
        self._min = min_bytes
        self._max_values = max_bytes // 8 if max_values is None else max_values

    def counted(self, key: Any, raw: bytes) -> int | None:
        """``raw``'s values (``jsonio.values_count``) when it extends the body cached under
        ``key`` and that one's were counted: those plus the new items' (``values_in``), so a
        long history is not counted whole again for each message added to it. The bytes on
        either side of the new items are the cached body's, outside any string, as long as
        the new ones hold whole strings; else None."""
        entry = self._entries.get(key)
        if entry is None or entry.counted is None or not _around(entry, raw):
            return None
        added = blank_escapes(raw[entry.end : len(raw) - len(entry.raw) + entry.end])
        if added.count(b'"') % 2:  # it ends in a string: the tail after it reads otherwise
            return None
        return entry.counted + values_in(added, blanked=True)

    def parse(self, key: Any, raw: bytes, counted: int | None = None) -> Any:
        """``loads(raw)``, sped up for a body that extends the last one cached under ``key``
        (None: do not cache). Raises what ``loads`` raises for invalid JSON. ``counted``, the
        caller's count of its values, is kept for ``counted`` on the next body."""
        if key is None or len(raw) < self._min:
            return loads_exact(raw)
        entry = self._pop(key)
        if entry is not None:
            body = _extend(entry, raw)
            if body is not None:
                grown = entry.values + structure(raw[entry.end : body[1]])
                self._put(key, _Entry(raw, body[1], body[0], entry.checked, grown, counted))
                return body[0]
        parsed = loads_exact(raw)
        if isinstance(parsed, dict) and isinstance(parsed.get("messages"), list):
            end = _split(raw)
            if end is not None:
                self.keep(key, raw, parsed, end, counted)
        return parsed

    def extends(self, key: Any, raw: bytes) -> bool:
        """Whether ``raw`` is the body cached under ``key`` with bytes spliced in after its
        last message: ``parse`` then decodes only those."""
        entry = self._entries.get(key)
        return entry is not None and _around(entry, raw)

    def keep(self, key: Any, raw: bytes, body: Any, end: int, counted: int | None) -> None:
        """Cache ``body``, parsed from ``raw`` elsewhere (``api.body_pieces``), under ``key``
        (None: do not), as ``parse`` caches a body it parses whole; ``end`` is the offset just
        after the last message of its ``messages``."""
        if key is None or len(raw) < self._min:
            return
        self._pop(key)
        self._put(key, _Entry(raw, end, body, values=structure(raw), counted=counted))

    def checked(self, key: Any, body: Any) -> int:
        """How many leading messages of ``body`` (what ``parse`` just returned under ``key``)
        are the very objects of an earlier body that ``mark_checked`` vouched for: a caller
        that validates each message skips those (the prefix of an extended body is the
        earlier body's message dicts, and nothing on the request path mutates them)."""
        entry = self._entries.get(key)
        return entry.checked if entry is not None and entry.body is body else 0

    def mark_checked(self, key: Any, body: Any) -> None:
        """Record that every message of ``body`` (``parse``'s answer under ``key``) passed
        the caller's check; a later body that extends it starts its check after them."""
        entry = self._entries.get(key)
        if entry is not None and entry.body is body:
            self._entries[key] = replace(entry, checked=len(body["messages"]))

    def _pop(self, key: Any) -> _Entry | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._size -= len(entry.raw)
            self._values -= entry.values
        return entry

    def _put(self, key: Any, entry: _Entry) -> None:
        if len(entry.raw) > self._max or entry.values > self._max_values:
            return
        self._entries[key] = entry
        self._size += len(entry.raw)
        self._values += entry.values
        while self._size > self._max or self._values > self._max_values:
            _, dropped = self._entries.popitem(last=False)
            self._size -= len(dropped.raw)
            self._values -= dropped.values


def _around(entry: _Entry, raw: bytes) -> bool:
    """Whether ``raw`` is ``entry``'s body with bytes spliced in after its last message."""
    prev, end = entry.raw, entry.end
    if len(raw) < len(prev) or not raw.startswith(memoryview(prev)[:end]):
        return False
    return raw.endswith(memoryview(prev)[end:])


def _extend(entry: _Entry, raw: bytes) -> tuple[dict[str, Any], int] | None:
    """(body, end) when ``raw`` is ``entry``'s body with items spliced in after its last
    message; None otherwise."""
    prev, end = entry.raw, entry.end
    tail = len(prev) - end
    if not _around(entry, raw):
        return None
    middle = raw[end : len(raw) - tail]
    try:
        items = loads(b"[null" + middle + b"]")
    except ValueError:
        return None
    body = dict(entry.body)
    body["messages"] = [*entry.body["messages"], *items[1:]]
    new_end = end + len(middle.rstrip(_WS))
    return body, new_end
