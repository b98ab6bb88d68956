"""The record of the HTTP request being served: its id, its session, its time spent on providers.

``proxy.middleware.AccessLog`` opens one ``RequestRecord`` per request and puts it in a
context variable; code further down adds to it (``note_session``, ``UpstreamTimer``) without
being handed it, and the log formatters (``proxy.logs``) stamp every line written while the
request runs with its ids. The variable holds a mutable object rather than values: a
streamed body runs in a child task with a copy of the context, and what that task adds must
reach the access line written when the response ends.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from dataclasses import dataclass

__all__ = [
    "RequestRecord", "UpstreamTimer", "begin", "current", "end", "note_session", "note_upstream",
]


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    session_id: str | None = None
    upstream_seconds: float = 0.0


_current: ContextVar[RequestRecord | None] = ContextVar("cascade_request", default=None)


def begin(record: RequestRecord) -> Token[RequestRecord | None]:
    """Make ``record`` the current request's (until ``end`` with the returned token)."""
    return _current.set(record)


def end(token: Token[RequestRecord | None]) -> None:
    _current.reset(token)


def current() -> RequestRecord | None:
    return _current.get()


def note_session(session_id: str) -> None:
    """The session this request is about: logged, and named in the response's X-Session-Id."""
    if (record := _current.get()) is not None:
        record.session_id = session_id


def note_upstream(seconds: float) -> None:
    """Add time spent on a provider call to the current request's upstream duration."""
    if (record := _current.get()) is not None:
        record.upstream_seconds += seconds


class UpstreamTimer:
    """Times one provider call, from its creation until the first ``stop``.

    It keeps the record current at its creation, so ``stop`` may run in another task (a
    stream's body, closed by whichever task finishes it) and still count for the request.
    """

    __slots__ = ("_record", "_start")

    def __init__(self) -> None:
        self._record = _current.get()
        self._start: float | None = time.perf_counter()

    def stop(self) -> None:
        if self._start is not None and self._record is not None:
            self._record.upstream_seconds += time.perf_counter() - self._start
        self._start = None
