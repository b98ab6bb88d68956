"""What a test scripts for the fake upstream: replies, errors and raw bytes, and the request
a callable responder is given.

:func:`reply`, :func:`error`, :func:`raw` (and :func:`rate_limited`,
:func:`context_length_exceeded`) build the values :meth:`FakeUpstream.script` queues; a
:data:`Responder` may also be a callable that picks one from the :class:`RecordedRequest`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

__all__ = [
    "Error",
    "Pacer",
    "Raw",
    "RecordedRequest",
    "Reply",
    "Responder",
    "context_length_exceeded",
    "error",
    "raw",
    "rate_limited",
    "reply",
    "tool_call",
]

_SSE = "text/event-stream; charset=utf-8"
_JSON = "application/json"


class Pacer:
    """Lets a stream's body frames out only as the test allows, so that a test proves a frame
    reached the client before the provider sent the next one without timing anything.

    The first frame goes at once; frame ``i`` waits until :meth:`allow` has been called ``i``
    times. A frame not allowed within ``patience`` seconds ends the body there, without the
    rest (:attr:`expired` is then set): a proxy that held the stream back gets only part of
    it, and the test reading it fails on what it got, not by hanging.

    With ``first=True`` the response's headers and first frame wait too, for one more
    :meth:`allow` (frame ``i`` for ``i + 1``): a whole answer the provider holds until the
    test lets it come (``allow`` enough for all of it), like a ``first_byte_delay`` of
    however long the test needs. Run out of patience there, it is a 504 with no body.
    """

    def __init__(self, patience: float = 20.0, *, first: bool = False) -> None:
        self.patience = patience
        self.first = first
        self.expired = False
        self._allowed = 0
        self._lock = threading.Lock()

    def allow(self, frames: int = 1) -> None:
        """Let the next ``frames`` frames out."""
        with self._lock:
            self._allowed += frames

    def allows(self, frame: int) -> bool:
        with self._lock:
            return frame + int(self.first) <= self._allowed


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the fake received it. Header names are lower-cased."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    json: Any
    content: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    """A successful chat completion; streamed as SSE iff the request had ``stream: true``."""

    content: str | None = "ok"
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    usage: tuple[int, int] | None = None
    finish_reason: str | None = None
    id: str | None = None
    chunks: int = 3
    first_byte_delay: float = 0.0
    first_token_delay: float = 0.0
    chunk_delay: float = 0.0
    reset_after: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    pacer: Pacer | None = None


@dataclass(frozen=True, slots=True)
class Error:
    """A non-2xx JSON response, e.g. 429 with ``Retry-After``."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    first_byte_delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Raw:
    """Bytes sent exactly as given, one body chunk per item (hand-written SSE, bad JSON …)."""

    chunks: tuple[bytes, ...]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=lambda: {"content-type": _SSE})
    first_byte_delay: float = 0.0
    chunk_delay: float = 0.0
    reset_after: int | None = None
    pacer: Pacer | None = None


Responder: TypeAlias = "Reply | Error | Raw | Callable[[RecordedRequest], Reply | Error | Raw]"


def tool_call(name: str, arguments: Mapping[str, Any] | str, *, id: str | None = None) -> dict:
    """An OpenAI-shaped tool call; ``id=None`` becomes ``call_<seq>_<k>`` when rendered."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": id, "type": "function", "function": {"name": name, "arguments": args}}


def _normalise_call(call: Mapping[str, Any]) -> Mapping[str, Any]:
    if "function" in call:
        return call
    return tool_call(call["name"], call.get("arguments", {}), id=call.get("id"))


def reply(
    content: str | None = "ok",
    *,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
    usage: tuple[int, int] | None = None,
    finish_reason: str | None = None,
    id: str | None = None,
    chunks: int = 3,
    first_byte_delay: float = 0.0,
    first_token_delay: float = 0.0,
    chunk_delay: float = 0.0,
    reset_after: int | None = None,
    headers: Mapping[str, str] | None = None,
    pacer: Pacer | None = None,
) -> Reply:
    """Build a chat completion reply.

    ``tool_calls`` items are OpenAI-shaped (see :func:`tool_call`) or ``{"name", "arguments",
    "id"?}``. ``usage=(prompt, completion)`` overrides the computed usage. ``finish_reason``
    defaults to ``"tool_calls"`` when there are tool calls, else ``"stop"``. A ``pacer``
    releases the body's frames one by one (:class:`Pacer`).
    """
    return Reply(
        content=content,
        tool_calls=tuple(_normalise_call(c) for c in tool_calls or ()),
        usage=usage,
        finish_reason=finish_reason,
        id=id,
        chunks=max(1, chunks),
        first_byte_delay=first_byte_delay,
        first_token_delay=first_token_delay,
        chunk_delay=chunk_delay,
        reset_after=reset_after,
        headers=dict(headers or {}),
        pacer=pacer,
    )


def error(
    status: int,
    body: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    *,
    first_byte_delay: float = 0.0,
) -> Error:
    """A JSON error response; the default body is OpenAI's ``{"error": {...}}`` shape."""
    if body is None:
        body = _error_body(f"fake upstream error {status}", "server_error", None)
    return Error(status, dict(body), dict(headers or {}), first_byte_delay)


def rate_limited(retry_after: int | str = 1) -> Error:
    """429 with ``Retry-After`` (seconds), as OpenAI sends it."""
    body = _error_body("Rate limit reached (fake)", "requests", "rate_limit_exceeded")
    return error(429, body, {"retry-after": str(retry_after)})


def context_length_exceeded(message: str | None = None) -> Error:
    """400 ``context_length_exceeded``, the error a too-long prompt gets from OpenAI."""
    msg = message or "This model's maximum context length is 128000 tokens (fake)."
    body = _error_body(msg, "invalid_request_error", "context_length_exceeded", "messages")
    return error(400, body)


def raw(
    *chunks: bytes | str,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
    first_byte_delay: float = 0.0,
    chunk_delay: float = 0.0,
    reset_after: int | None = None,
    pacer: Pacer | None = None,
) -> Raw:
    """Send ``chunks`` verbatim (``str`` is UTF-8 encoded); content-type defaults to SSE. A
    ``pacer`` releases them one by one (:class:`Pacer`)."""
    data = tuple(c.encode() if isinstance(c, str) else c for c in chunks)
    hdrs = dict(headers) if headers is not None else {"content-type": _SSE}
    return Raw(data, status, hdrs, first_byte_delay, chunk_delay, reset_after, pacer)


def _error_body(message: str, type_: str, code: str | None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
