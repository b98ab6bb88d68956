"""Pure SSE handling for relaying upstream chat streams byte for byte (STYLE §E2).

``EventSplitter`` cuts the upstream byte stream into events without altering a byte, so the
relay can forward each event untouched while the helpers below read ``usage``, detect
``[DONE]`` and accumulate the assistant message for storage. ``completion_to_chunks`` goes
the other way, for answering a streaming client with a completion the proxy produced itself.
Pure: no I/O, no clocks.

The relay runs ``is_done``, ``parse_chunk`` and ``StreamAccumulator.add`` on every event of
every stream, so each has a fast path for the one form providers send (a single ``data: ``
line of JSON, parsed with orjson) and falls back to the general reading, with the stdlib's
``json``, for anything else: the result is the same either way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "DONE",
    "KEEPALIVE",
    "EventSplitter",
    "event_data",
    "parse_chunk",
    "parse_general",
    "is_done",
    "usage_of",
    "is_usage_only",
    "encode_event",
    "error_event",
    "StreamAccumulator",
    "completion_to_chunks",
]

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"

_EOL = re.compile(rb"\r\n?|\n")
_LINE = re.compile(r"\r\n|\r|\n")


class EventSplitter:
    """Incremental splitter of an SSE byte stream into events.

    Invariant: for any split of the input into chunks, the concatenation of every ``feed``
    result followed by ``flush()`` is exactly the input, and the list of events does not
    depend on where the chunks were split. An event is every line up to and including the
    first empty line; ``\\n``, ``\\r\\n`` and ``\\r`` all end a line. A trailing ``\\r`` is held
    back until the next byte shows whether it is part of ``\\r\\n``.
    """

    __slots__ = ("_buf", "_line_start", "_scan")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._line_start = 0
        self._scan = 0

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add ``chunk``; return the events it completed, bytes exactly as received."""
        buf = self._buf
        if not buf and _whole_events(chunk):  # the common read: whole "\n"-ended events
            return [part + b"\n\n" for part in chunk[:-2].split(b"\n\n")]
        buf += chunk
        events: list[bytes] = []
        while (m := _EOL.search(buf, self._scan)) is not None:
            if m.end() == len(buf) and m.group() == b"\r":
                self._scan = m.start()  # lone "\r" at the end: maybe "\r\n" next
                return events
            if m.start() == self._line_start:  # empty line: the event ends here
                events.append(bytes(buf[: m.end()]))
                del buf[: m.end()]
                self._line_start = self._scan = 0
            else:
                self._line_start = self._scan = m.end()
        self._scan = len(buf)
        return events

    def flush(self) -> bytes:
        """Return whatever is left at EOF (an unterminated event) and reset."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._line_start = self._scan = 0
        return rest


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
    except ValueError:
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
    return dict(usage) if usage is not None and _is_map(usage) else None


def is_usage_only(chunk: Mapping[str, Any]) -> bool:
    """The final frame OpenAI sends with ``stream_options.include_usage``: no choices, usage.

    The relay drops it when the proxy asked for usage but the client did not.
    """
    return chunk.get("choices") == [] and usage_of(chunk) is not None


def _is_map(value: Any) -> bool:
    """``isinstance(value, Mapping)``, without the ABC check for the dicts JSON gives."""
    return type(value) is dict or isinstance(value, Mapping)


def encode_event(payload: Mapping[str, Any]) -> bytes:
    """One ``data: {json}\\n\\n`` frame, the framing OpenAI uses."""
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n"


def error_event(message: str, *, type: str = "upstream_error", code: str | None = None) -> bytes:
    """The OpenAI-shaped mid-stream error frame; the relay sends ``DONE`` after it."""
    return encode_event({"error": {"message": message, "type": type, "param": None, "code": code}})


@dataclass(slots=True)
class _ToolCall:
    id: str | None = None
    type: str | None = None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, e.g. a signature


@dataclass(slots=True)
class _Choice:
    role: str | None = None
    content: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None


class StreamAccumulator:
    """Builds the final assistant message(s) from ``chat.completion.chunk`` deltas.

    Mutable by design: the relay feeds it one chunk at a time while forwarding bytes.
    """

    def __init__(self) -> None:
        self.id: str | None = None
        self.model: str | None = None
        self.created: int | None = None
        self.system_fingerprint: str | None = None
        self.usage: dict[str, Any] | None = None
        self._choices: dict[int, _Choice] = {}
        self._missing: tuple[str, ...] = _HEAD  # the top-level fields not seen yet

    def add(self, chunk: Mapping[str, Any]) -> None:
        """Fold one parsed chunk in; top-level fields keep their first value, usage its last."""
        found = False
        for key in self._missing:
            if chunk.get(key) is not None:
                setattr(self, key, chunk[key])
                found = True
        if found:
            self._missing = tuple(k for k in self._missing if getattr(self, k) is None)
        if chunk.get("usage") is not None:
            usage = usage_of(chunk)
            if usage is not None:
                self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for pos, raw in enumerate(choices):
            if _is_map(raw):
                index = _int(raw.get("index"), pos)
                choice = self._choices.get(index)
                if choice is None:
                    choice = self._choices[index] = _Choice()
                self._add_choice(choice, raw)

    def _add_choice(self, choice: _Choice, raw: Mapping[str, Any]) -> None:
        if raw.get("finish_reason") is not None:
            choice.finish_reason = raw["finish_reason"]
        delta = raw.get("delta")
        if not delta or not _is_map(delta):
            return
        if delta.get("role") is not None:
            choice.role = delta["role"]
        content = delta.get("content")
        if isinstance(content, str):
            choice.content.append(content)
        refusal = delta.get("refusal")
        if isinstance(refusal, str):
            choice.refusal.append(refusal)
        calls = delta.get("tool_calls")
        if not calls or not isinstance(calls, list):
            return
        for pos, raw_call in enumerate(calls):
            if _is_map(raw_call):
                index = _int(raw_call.get("index"), pos)
                call = choice.tool_calls.get(index)
                if call is None:
                    call = choice.tool_calls[index] = _ToolCall()
                _add_tool_call(call, raw_call)

    @property
    def indices(self) -> list[int]:
        """Choice indices seen so far, ascending."""
        return sorted(self._choices)

    def finish_reason(self, index: int = 0) -> str | None:
        """The choice's finish reason, ``None`` if the stream ended without one."""
        choice = self._choices.get(index)
        return choice.finish_reason if choice else None

    def message(self, index: int = 0) -> dict[str, Any]:
        """The assistant message for choice ``index``, without ``None``/empty fields.

        ``content`` is omitted when empty beside tool calls or a refusal, but kept as ``""``
        otherwise so the message stays valid to send upstream again.
        """
        choice = self._choices.get(index) or _Choice()
        msg: dict[str, Any] = {"role": choice.role or "assistant"}
        content = "".join(choice.content)
        refusal = "".join(choice.refusal)
        if content or not (choice.tool_calls or refusal):
            msg["content"] = content
        if refusal:
            msg["refusal"] = refusal
        if choice.tool_calls:
            msg["tool_calls"] = [
                _tool_call_dict(choice.tool_calls[i]) for i in sorted(choice.tool_calls)
            ]
        return msg

    def to_completion(self) -> dict[str, Any]:
        """A non-streaming ``chat.completion`` object assembled from the stream."""
        choices = []
        for i in self.indices:
            msg = {"role": "assistant", "content": None, **self.message(i)}
            finish = self.finish_reason(i)
            choices.append({"index": i, "message": msg, "finish_reason": finish, "logprobs": None})
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage,
        }
        if self.system_fingerprint is not None:
            out["system_fingerprint"] = self.system_fingerprint
        return out


_HEAD = ("id", "model", "created", "system_fingerprint")


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _add_tool_call(call: _ToolCall, raw: Mapping[str, Any]) -> None:
    if call.id is None and raw.get("id"):
        call.id = raw["id"]
    if call.type is None and raw.get("type"):
        call.type = raw["type"]
    for key, value in raw.items():  # a provider's own fields go back to it, as sent
        if key not in _TOOL_CALL_KEYS and value is not None:
            call.extra.setdefault(key, value)
    fn = raw.get("function")
    if not isinstance(fn, Mapping):
        return
    name = fn.get("name")
    if isinstance(name, str) and name != call.name:
        call.name += name  # some servers repeat the full name on every delta
    if isinstance(fn.get("arguments"), str):
        call.arguments.append(fn["arguments"])


_TOOL_CALL_KEYS = frozenset(("index", "id", "type", "function"))


def _tool_call_dict(call: _ToolCall) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if call.id is not None:
        out["id"] = call.id
    out["type"] = call.type or "function"
    out["function"] = {"name": call.name, "arguments": "".join(call.arguments)}
    out.update(call.extra)
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return ""


def _choice_frames(index: int, message: Mapping[str, Any], finish: Any) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = [{"role": message.get("role") or "assistant", "content": ""}]
    if text := _text(message.get("content")):
        frames.append({"content": text})
    if refusal := message.get("refusal"):
        frames.append({"refusal": refusal})
    for k, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        head = {"index": k, "id": call.get("id"), "type": call.get("type") or "function"}
        frames.append({"tool_calls": [{**head, "function": {"name": fn.get("name", "")}}]})
        if args := fn.get("arguments"):
            frames.append({"tool_calls": [{"index": k, "function": {"arguments": args}}]})
    choices = [{"index": index, "delta": d, "finish_reason": None} for d in frames]
    choices.append({"index": index, "delta": {}, "finish_reason": finish})
    return choices


def completion_to_chunks(completion: Mapping[str, Any], *, include_usage: bool) -> list[bytes]:
    """Encode a ``chat.completion`` as the SSE frames a streaming client expects, then DONE.

    Per choice: a role frame, a content frame, a refusal frame, per tool call a frame with
    index/id/name then one with its arguments, and a finish frame. With ``include_usage``,
    every frame carries ``usage: null`` and a final usage-only frame follows, as OpenAI does.
    Round-trips through ``StreamAccumulator.to_completion``.
    """
    base: dict[str, Any] = {
        "id": completion.get("id"),
        "object": "chat.completion.chunk",
        "created": completion.get("created"),
        "model": completion.get("model"),
    }
    if completion.get("system_fingerprint") is not None:
        base["system_fingerprint"] = completion["system_fingerprint"]
    frames: list[bytes] = []
    for pos, choice in enumerate(completion.get("choices") or []):
        index = _int(choice.get("index"), pos)
        message = choice.get("message") or {}
        for c in _choice_frames(index, message, choice.get("finish_reason")):
            chunk = {**base, "choices": [c]}
            if include_usage:
                chunk["usage"] = None
            frames.append(encode_event(chunk))
    usage = completion.get("usage")
    if include_usage and usage is not None:
        frames.append(encode_event({**base, "choices": [], "usage": usage}))
    frames.append(DONE)
    return frames
