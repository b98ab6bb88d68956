"""Pure SSE handling for relaying upstream chat streams byte for byte (STYLE §E2).

``EventSplitter`` cuts the upstream byte stream into events without altering a byte, so the
relay can forward each event untouched while the helpers below read ``usage`` and detect
``[DONE]``; ``proxy.chunks`` builds the assistant message from the parsed chunks, and goes
the other way for a completion the proxy produced itself. Pure: no I/O, no clocks.

The relay runs ``is_done``, ``parse_chunk`` and ``StreamAccumulator.add`` on every event of
every stream, so each has a fast path for the one form providers send (a single ``data: ``
line of JSON, parsed with orjson) and falls back to the general reading, with the stdlib's
``json``, for anything else: the result is the same either way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "BOM",
    "DONE",
    "FIELDS",
    "KEEPALIVE",
    "STREAM_HEADERS",
    "BodySplitter",
    "opening_of",
    "EventSplitter",
    "event_data",
    "parse_chunk",
    "parse_general",
    "is_done",
    "usage_of",
    "is_usage_only",
    "is_map",
    "encode_event",
    "reframe",
    "error_event",
]

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"
STREAM_HEADERS: Mapping[str, str] = {
    "cache-control": "no-store, no-transform",
    "x-accel-buffering": "no",
}
"""What every event stream the proxy answers carries (a chat stream, the session events): no
cache keeps its private content, no intermediary transforms it (a compressing proxy or CDN
holds events back to fill its blocks), and nginx (or another buffering reverse proxy) in front
passes each event on as it comes instead of buffering the answer."""

_EOL = re.compile(rb"\r\n?|\n")
_LINE = re.compile(r"\r\n|\r|\n")


class EventSplitter:
    """Incremental splitter of an SSE byte stream into events.

    Invariant: for any split of the input into chunks, the concatenation of every ``feed``
    result followed by ``flush()`` is exactly the input. An event is every line up to and
    including the first empty line; ``\\n``, ``\\r\\n`` and ``\\r`` all end a line. An event
    goes out the moment its empty line ends, even when that line ends in a ``\\r`` that is
    the last byte read: a stream of ``\\r``-ended lines is no event behind. Should the next
    read begin with the ``\\n`` of that ``\\r\\n``, that ``\\n`` comes as an event of its own
    (no line, no data), so the events' lines do not depend on where the chunks were split,
    and their bytes differ only there. A ``\\r`` that ends a line inside an event is held
    back until the next byte shows whether it is part of ``\\r\\n``.
    """

    __slots__ = ("_buf", "_cr", "_line_start", "_scan")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._line_start = 0
        self._scan = 0
        self._cr = False  # the last event ended in a "\r" that was the last byte read

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add ``chunk``; return the events it completed, bytes exactly as received."""
        events: list[bytes] = []
        if self._cr and chunk:
            self._cr = False
            if chunk[0] == 0x0A:  # the "\n" of the "\r\n" that ended the last event
                events.append(b"\n")
                chunk = chunk[1:]
        buf = self._buf
        if not buf and _whole_events(chunk):  # the common read: whole "\n"-ended events
            return [*events, *(part + b"\n\n" for part in chunk[:-2].split(b"\n\n"))]
        buf += chunk
        while (m := _EOL.search(buf, self._scan)) is not None:
            empty = m.start() == self._line_start
            if m.end() == len(buf) and m.group() == b"\r" and not empty:
                self._scan = m.start()  # lone "\r" at the end of a line: maybe "\r\n" next
                return events
            if empty:  # empty line: the event ends here
                events.append(bytes(buf[: m.end()]))
                del buf[: m.end()]
                self._line_start = self._scan = 0
                self._cr = not buf and m.group() == b"\r"
            else:
                self._line_start = self._scan = m.end()
        self._scan = len(buf)
        return events

    @property
    def pending(self) -> int:
        """How many bytes of an event that has not ended are held."""
        return len(self._buf)

    def flush(self) -> bytes:
        """Return whatever is left at EOF (an unterminated event) and reset."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._line_start = self._scan = 0
        self._cr = False
        return rest


class BodySplitter:
    """An ``EventSplitter`` for a body that opens as events. One whose first byte past blank
    space and a byte-order mark (``opening_of``) is ``{`` is a whole JSON answer where a
    stream belongs (a provider that ignored ``stream``), no event (an SSE line opens with a
    field's name or ``:``): it is held whole and given by ``flush``, since a pretty-printed
    one's blank lines end no events. Held only until a field's line follows a blank line
    (``_EVENT_AFTER``), which no JSON text holds: a stream that opened with a bare JSON line
    goes out as its events come from there on. Blank lines before the first other byte go
    out as they end (``_blank_lines``); a byte-order mark's first bytes wait for the byte
    that says which the body is, and a stream's leading mark is dropped, as an SSE parser
    drops it."""

    __slots__ = ("_events", "_head", "_whole")

    def __init__(self) -> None:
        self._events = EventSplitter()
        self._head: bytearray | None = bytearray()  # None once the body's kind is known
        self._whole: bytearray | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        """As ``EventSplitter.feed``; no event for a whole JSON answer, held."""
        if self._whole is not None:
            return self._held(chunk)
        if self._head is not None:
            self._head += chunk
            opening = opening_of(self._head)
            if not opening:  # blank space: its ended lines go out (a provider's keep-alive)
                return self._blank_lines()
            if BOM.startswith(opening):  # nothing yet says which the body is
                return []
            chunk, self._head = bytes(self._head), None
            if opening.startswith(b"{"):
                self._whole = bytearray()
                return self._held(chunk)
            chunk = chunk.removeprefix(BOM)  # an SSE parser skips it: no part of an event
        return self._events.feed(chunk)

    def _blank_lines(self) -> list[bytes]:
        """The events of the head's ended lines, all blank (no field: each goes out as the
        relay sends an unknown field's, as a keep-alive), taken from it: blank space before a
        JSON answer is no part of it, and the rest of a line waits for its end."""
        head = self._head
        assert head is not None
        end = max(head.rfind(b"\n"), head.rfind(b"\r")) + 1
        if not end:
            return []
        lines = bytes(head[:end]).removeprefix(BOM)
        del head[:end]
        return self._events.feed(lines)

    def _held(self, chunk: bytes) -> list[bytes]:
        """``chunk`` added to the whole answer held; its events, and the events' from then
        on, once a field's line after a blank line shows it a stream."""
        whole = self._whole
        assert whole is not None
        start = max(len(whole) - _EVENT_AFTER_SPAN, 0)  # one cut between reads is found too
        whole += chunk
        if _EVENT_AFTER.search(whole, start) is None:
            return []
        self._whole = None
        return self._events.feed(bytes(whole))

    @property
    def pending(self) -> int:
        """How many bytes are held: of an event that has not ended, or of a whole answer."""
        if self._whole is not None:
            return len(self._whole)
        return self._events.pending + len(self._head or b"")

    def flush(self) -> bytes:
        """What is left at EOF (an unterminated event, or the whole answer held)."""
        held = self._whole if self._whole is not None else self._head
        if held:
            return bytes(held)
        return self._events.flush()


BOM = b"\xef\xbb\xbf"
"""UTF-8's byte-order mark, which a .NET writer puts first, and a JSON or SSE parser skips."""
FIELDS = (b"data:", b"event:", b"id:", b"retry:")
"""How a line of each SSE field opens (a comment's opens with ``:``)."""
_EVENT_AFTER = re.compile(rb"(?:\r\n?|\n)(?:\r\n?|\n)(?:" + b"|".join(FIELDS) + rb")")
"""A blank line, then a line opening with an SSE field: an event stream, never a JSON text
(whose strings hold no line break, and whose words are no field's name)."""
_EVENT_AFTER_SPAN = 10  # the most bytes of a match that one read can have ended in


def opening_of(body: bytes | bytearray) -> bytes:
    """``body`` past its blank space and a UTF-8 byte-order mark (a .NET writer's), which
    an SSE parser and a JSON parser each skip."""
    return bytes(body.lstrip().removeprefix(BOM).lstrip())


def _whole_events(chunk: bytes) -> bool:
    """Whether ``chunk`` is whole events whose lines all end in ``\\n``, none of them an
    empty line of its own: then every ``\\n\\n`` in it ends one event, and nothing else."""
    return (
        chunk.endswith(b"\n\n")
        and not chunk.startswith(b"\n")
        and b"\r" not in chunk
        and b"\n\n\n" not in chunk
    )


def event_data(event: bytes) -> str | None:
    """The ``data:`` lines of an event joined with ``\\n``; ``None`` if it has none."""
    lines = _LINE.split(event.decode("utf-8", errors="replace"))
    data: list[str] = []
    for line in lines:
        name, colon, value = line.partition(":")
        if name != "data":
            continue  # comments (":...") and other fields
        if colon and value.startswith(" "):
            value = value[1:]
        data.append(value)
    return "\n".join(data) if data else None


_DIGITS = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19  # orjson reads an integer beyond 64 bits as a float; json exactly


def _orjson_value(event: bytes) -> bytes | None:
    """The value of an event that is one ``data: `` line ended by ``\\n\\n`` (what providers
    send) and that orjson reads as json does; ``None`` for any other."""
    if not event.startswith(b"data: ") or event.find(b"\n") != len(event) - 2:
        return None
    if event[-1] != 0x0A or b"\r" in event:  # "\r" ends a line too
        return None
    value = event[6:-2]
    return None if _LONG_NUMBER in value.translate(_DIGITS) else value


def parse_chunk(event: bytes) -> dict[str, Any] | None:
    """The JSON object carried by an event; ``None`` for ``[DONE]``, comments or non-JSON."""
    value = _orjson_value(event)
    if value is not None:
        try:  # what orjson refuses (NaN, bad UTF-8, ...) json may take: read on below
            obj = orjson.loads(value)
        except orjson.JSONDecodeError:
            pass
        else:
            return obj if isinstance(obj, dict) else None
    return parse_general(event)


def parse_general(event: bytes) -> dict[str, Any] | None:
    """``parse_chunk`` without its shortcut: the event's data lines, read with the stdlib's
    json; it reads every form an event may take (tests hold the shortcut to it)."""
    data = event_data(event)
    if data is None or data.strip() == "[DONE]":
        return None
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):  # nested past Python's limit: no chunk either
        return None
    return obj if isinstance(obj, dict) else None


def is_done(event: bytes) -> bool:
    """Whether the event is the ``data: [DONE]`` terminator."""
    if b"[DONE]" not in event:  # no decoding of other bytes can produce it
        return False
    data = event_data(event)
    return data is not None and data.strip() == "[DONE]"


def usage_of(chunk: Mapping[str, Any]) -> dict[str, Any] | None:
    """The chunk's ``usage`` object, or ``None`` (OpenAI sends ``usage: null`` mid-stream)."""
    usage = chunk.get("usage")
    return dict(usage) if usage is not None and is_map(usage) else None


def is_usage_only(chunk: Mapping[str, Any]) -> bool:
    """The final frame OpenAI sends with ``stream_options.include_usage``: no choices, usage.

    The relay drops it when the proxy asked for usage but the client did not. Some providers
    leave ``choices`` out of it, or send it ``null``: the same frame, which the openai SDK's
    stream helper fails on (it iterates every chunk's choices), so it is no less dropped.
    One that holds an ``error`` is the provider's error frame, which the client must get.
    """
    return not chunk.get("choices") and usage_of(chunk) is not None and not chunk.get("error")


def is_map(value: Any) -> bool:
    """``isinstance(value, Mapping)``, without the ABC check for the dicts JSON gives."""
    return type(value) is dict or isinstance(value, Mapping)


def encode_event(payload: Mapping[str, Any]) -> bytes:
    """One ``data: {json}\\n\\n`` frame, the framing OpenAI uses."""
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n"


def reframe(event: bytes, payload: Mapping[str, Any]) -> bytes:
    """``payload`` as the data of ``event``, whose other lines (comments, ``id:``, ``retry:``,
    ``event:``) go along in their order, each ended by ``\\n``: an event the relay rewrites
    tells an SSE client all the provider's did but its data."""
    if event.startswith(b"data") and event.count(b"\n") == 2 and b"\r" not in event:
        return encode_event(payload)  # one data line, what providers send
    kept = [line + b"\n" for line in _EOL.split(event) if line and not _is_data(line)]
    return b"".join(kept) + encode_event(payload)


def _is_data(line: bytes) -> bool:
    return line.partition(b":")[0] == b"data"


def error_event(
    message: str,
    *,
    type: str = "upstream_error",
    code: str | None = None,
    retry_after: str | None = None,
) -> bytes:
    """The OpenAI-shaped mid-stream error frame; the relay sends ``DONE`` after it. A
    provider's ``Retry-After``, which no header can carry once the stream began, goes in a
    ``retry_after`` field of its own (the SDKs keep an error's every field in its ``body``)."""
    error = {"message": message, "type": type, "param": None, "code": code}
    if retry_after is not None:
        error["retry_after"] = retry_after
    return encode_event({"error": error})
