"""The record of the HTTP request being served: its id, its session, its time spent on providers.

``proxy.middleware.AccessLog`` opens one ``RequestRecord`` per request and puts it in a
context variable; code further down adds to it (``note_session``, ``UpstreamTimer``) without
being handed it, and the log formatters (``proxy.logs``) stamp every line written while the
request runs with its ids. The variable holds a mutable object rather than values: a
streamed body runs in a child task with a copy of the context, and what that task adds must
reach the access line written when the response ends.

``proxy.observe`` hangs its own per-request state on the record (``obs``): what the metrics
and the request's span need from code that is not handed the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "RequestRecord",
    "UpstreamTimer",
    "apart",
    "begin",
    "current",
    "deadline_at",
    "end",
    "note_session",
    "note_session_wait",
    "session_wait",
    "note_upstream",
]


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    session_id: str | None = None
    upstream_seconds: float = 0.0
    upstream_waited: float = 0.0  # provider time up to each answer's first byte (streams)
    waits: list[float] = field(default_factory=list)  # calls not at their first byte yet
    session_waited: float | None = None  # time waiting for the session; None: never asked
    content_encoding: str | None = None  # the body's Content-Encoding, when it named one
    obs: Any = None  # proxy.observe.RequestObs when the app observes requests


_current: ContextVar[RequestRecord | None] = ContextVar("cascade_request", default=None)


def begin(record: RequestRecord) -> Token[RequestRecord | None]:
    """Make ``record`` the current request's (until ``end`` with the returned token)."""
    return _current.set(record)


def end(token: Token[RequestRecord | None]) -> None:
    _current.reset(token)


def current() -> RequestRecord | None:
    return _current.get()


T = TypeVar("T")


async def apart(work: Awaitable[T]) -> T:
    """Run ``work`` (the body of a task a request starts and does not wait for: a background
    compaction, a promotion) under a record of its own, which keeps the request's ids and
    its ``obs`` (the task's lines name the request; its span and counts are the request's)
    but none of its clocks: the task's provider calls and session waits run beside the
    request's, and added to its record they counted as time the request spent on providers
    or waiting for its session (``upstream_ms`` past ``duration_ms``, the overhead read as
    none). A task copies its context when made, so the record it sets is its own; awaited
    directly, the caller's record is current again once ``work`` returns or raises."""
    if (record := _current.get()) is None:
        return await work
    token = _current.set(RequestRecord(record.request_id, record.session_id, obs=record.obs))
    try:
        return await work
    finally:
        _current.reset(token)


def note_session(session_id: str) -> None:
    """The session this request is about: logged, and named in the response's X-Session-Id."""
    if (record := _current.get()) is not None:
        record.session_id = session_id


def note_session_wait(seconds: float) -> None:
    """Add time the current request spent waiting for its session (behind this replica's
    earlier requests on it, or for another's lease), 0 for a turn taken at once: logged
    and measured apart from the proxy's own time, which otherwise seems to hold it."""
    if (record := _current.get()) is not None:
        record.session_waited = (record.session_waited or 0.0) + seconds


@contextlib.contextmanager
def session_wait() -> Iterator[None]:
    """Time the block, however it ends, as a wait of the current request for its session
    (``note_session_wait``): one shape for the replica's queue and the lease's polls."""
    start = time.perf_counter()
    try:
        yield
    finally:
        note_session_wait(time.perf_counter() - start)


def note_upstream(seconds: float) -> None:
    """Add time spent on a provider call to the current request's upstream duration."""
    if (record := _current.get()) is not None:
        record.upstream_seconds += seconds


_deadline: ContextVar[float | None] = ContextVar("cascade_call_deadline", default=None)
_LATE = 0.001  # the loop runs a timer's callback up to its clock's resolution early


@contextlib.asynccontextmanager
async def deadline_at(when: float) -> AsyncIterator[None]:
    """``asyncio.timeout_at(when)``, its provider calls told: one it cuts off got no answer
    in time (``unreachable``), unlike one the proxy gave up because its client left."""
    token = _deadline.set(when)
    try:
        async with asyncio.timeout_at(when):
            yield
    finally:
        _deadline.reset(token)


def _past_deadline() -> bool:
    when = _deadline.get()
    return when is not None and asyncio.get_running_loop().time() + _LATE >= when


class UpstreamTimer:
    """Times one provider call, from its creation until the first ``stop``.

    It keeps the record current at its creation, so ``stop`` may run in another task (a
    stream's body, closed by whichever task finishes it) and still count for the request.
    ``first_byte`` marks the answer's headers: a stream's wait for the provider ends there,
    for the overhead (``upstream_waited``); a whole answer's wait ends at ``stop``.
    ``provider``, ``path``, ``model`` and ``method`` name the call for the metrics and its span.
    """

    __slots__ = ("_record", "_start", "_waiting", "_attempt", "traced")

    def __init__(
        self, provider: str = "", path: str = "", model: str | None = None, method: str = "POST"
    ) -> None:
        self._record = record = _current.get()
        self._start: float | None = time.perf_counter()
        self._waiting = record is not None
        self._attempt: Any = None
        self.traced = False  # the call has a span: ``trace_headers`` has something to send
        if record is not None:
            record.waits.append(self._start)
            if record.obs is not None:
                self._attempt = record.obs.attempt_started(provider, path, model, method)
                self.traced = self._attempt[1] is not None

    def trace_headers(self, host: str, port: int | None) -> dict[str, str]:
        """The W3C trace context the call to ``host`` sends upstream (none when tracing is
        off: a caller asks only when ``traced``); the call's span names that server."""
        if not self.traced or self._record is None or self._record.obs is None:
            return {}
        return dict(self._record.obs.trace_headers(self._attempt, host, port))

    def first_byte(self) -> None:
        record = self._record
        if self._waiting and record is not None and self._start is not None:
            self._waiting = False
            record.upstream_waited += time.perf_counter() - self._start
            record.waits.remove(self._start)

    def stop(
        self, status: int | None = None, *, cancelled: bool = False, failure: str | None = None
    ) -> None:
        """The call is over (``status``: the provider's, when it answered; ``cancelled``:
        the proxy gave it up, its client gone or the server stopping, which is no failure
        of the provider's; ``failure``: the exception's type that broke an answer off)."""
        if self._start is None or self._record is None:
            self._start = None
            return
        if cancelled and _past_deadline():  # cut off by its caller's deadline: no answer in time
            cancelled, failure = False, failure or ("TimeoutError" if status else None)
        self.first_byte()
        elapsed = time.perf_counter() - self._start
        self._record.upstream_seconds += elapsed
        self._start = None
        if self._attempt is not None:
            self._record.obs.attempt_done(self._attempt, elapsed, status, cancelled, failure)
