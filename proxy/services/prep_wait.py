"""Keep-alives while a streamed request waits before its provider call.

A streamed chat request may wait long before its provider is called: for its session behind
another request of the same session (which may stream for minutes), for the lease another
replica holds, for a compaction it runs or waits on. Its client, and every idle timeout in
between (nginx's 60 s), would hear nothing meanwhile. So the keep-alive clock of a stream
(``CASCADE_KEEPALIVE_SECONDS``) starts when the request is accepted, not when the provider
is called: ``PrepWait.around`` runs the request's preparation and provider call, and when
that has not answered within the interval, the response commits ``200`` and sends an SSE
comment every interval until the stream starts. A request that is ready within the interval
is as it was (its status, its headers, no extra frame); ``Forwarder.stream`` waits for the
provider's headers only as long as the interval has left (``remaining``), or, after the
``200``, until the clock's next comment would have been due (``until_due``), so the stream's
own keep-alives go on at the clock's pace, neither doubled nor late.

The fast path costs a timer handle, no task: only when the timer fires does one task start,
to send the response's start and the comments. Once the request has its response, the task
is stopped (``stop``) before any of the response goes out, so the two never write at once;
the response then continues the started one (``_Resumed``). An error the preparation raises
after the ``200`` is one OpenAI-shaped error frame, with the status's code, then ``[DONE]``,
as a provider's error after the ``200`` is (``round_answer.py``).

``Prepared`` is the route's answer to a streamed request: a response that prepares the request
as it is sent, so the clock sends with the ``send`` the framework hands every response (the
one its exception handling watches: an error before the ``200`` is answered as the route's
errors are). The comments are sent with it; a client that leaves meanwhile is
seen by its ``ClientWatch`` (the waits it guards end, and free what they held) and by the
resumed response, which listens as any stream does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from proxy import jsonio, sse
from proxy.db_answers import database_answer
from proxy.errors import ClientDisconnected, exception_body
from proxy.logs import causes
from proxy.observe import note_late_error

__all__ = ["PrepWait", "Prepared", "header_wait"]

log = logging.getLogger("cascade.forward")

_START_HEADERS = [
    (b"content-type", b"text/event-stream"),
    *((k.encode("latin-1"), v.encode("latin-1")) for k, v in sse.STREAM_HEADERS.items()),
]


class Prepared(Response):
    """A streamed request's response, prepared as it is sent: ``answer(clock)`` runs the
    request under its ``PrepWait`` with the ``send`` this response is called with, and the
    response it gives (resumed when the ``200`` went out meanwhile) is sent on."""

    def __init__(self, answer: Callable[[PrepWait], Awaitable[Response]], every: float) -> None:
        self.answer, self.every = answer, every  # nothing else of a Response is read

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        clock = PrepWait(send, self.every)
        response = await clock.around(self.answer(clock))
        await response(scope, receive, send)


class PrepWait:
    """One streamed request's keep-alive clock, from its acceptance to its stream's start
    (module docstring); ``send`` is the request's ASGI ``send``."""

    __slots__ = (
        "_send",
        "_every",
        "_deadline",
        "_beat_at",
        "_timer",
        "_beats",
        "_sending",
        "_stopping",
        "committed",
    )

    def __init__(self, send: Send, every: float) -> None:
        self._send = send
        self._every = every
        self._deadline = 0.0
        self._beat_at = 0.0  # when the last comment went out
        self._timer: asyncio.TimerHandle | None = None
        self._beats: asyncio.Task[None] | None = None
        self._sending = self._stopping = False
        self.committed = False  # the 200 went out: errors are frames from here on

    async def around(self, work: Awaitable[Response]) -> Response:
        """``work``'s response, started and kept alive while it takes longer than the
        interval; an error it raises after the ``200`` becomes the stream's error frame."""
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self._every
        self._timer = loop.call_later(self._every, self._commit)
        try:
            response = await work
        except Exception as exc:
            if not await self.stop():
                raise
            return _Resumed(_error_frames(exc))
        except BaseException:  # cancelled: nothing more goes out
            self._halt()
            raise
        if self._beats is None:  # the timer never fired: cancel it, nothing went out
            self._halt()
            return response
        if not await self.stop():
            return response
        if isinstance(response, StreamingResponse):
            return _Resumed(response.body_iterator, response)  # type: ignore[arg-type]
        return _Resumed(_frames_of(response), response)

    def remaining(self) -> float:
        """The seconds left of the interval (0 once it has passed)."""
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    def until_due(self) -> float:
        """Once the ``200`` went out: the seconds until the next comment is due, an interval
        after the last one (the stream's own keep-alives go on from there, not doubling it)."""
        return max(0.0, self._beat_at + self._every - asyncio.get_running_loop().time())

    async def stop(self) -> bool:
        """Stop the clock (its timer, or the comments, after the one being sent); returns
        whether the ``200`` went out. The request's stream is about to start."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        task = self._beats
        if task is not None and not task.done():
            self._stopping = True
            if not self._sending:
                task.cancel()
            await asyncio.wait({task})
        return self.committed

    def _halt(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._beats is not None:
            self._beats.cancel()

    def _commit(self) -> None:
        self._timer = None
        self._beats = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        """The ``200``, then a comment every interval until ``stop``."""
        self._sending = True
        try:
            await self._send(
                {"type": "http.response.start", "status": 200, "headers": _START_HEADERS}
            )
            self.committed = True
            while not self._stopping:
                await self._send(
                    {"type": "http.response.body", "body": sse.KEEPALIVE, "more_body": True}
                )
                self._beat_at = asyncio.get_running_loop().time()
                if self._stopping:
                    return
                self._sending = False
                await asyncio.sleep(self._every)
                self._sending = True
        except OSError:  # the client is gone: its watch ends the request
            return
        finally:
            self._sending = False


async def header_wait(clock: PrepWait | None, every: float) -> tuple[bool, float]:
    """For a stream whose step is ready: whether its ``200`` went out already (its clock is
    stopped either way), and how long its provider's headers may be awaited before the next
    bytes are due: what is left of the interval (``every`` without a clock), or, after the
    ``200``, until the next comment is due."""
    if clock is None:
        return False, every
    if await clock.stop():
        return True, clock.until_due()
    return False, clock.remaining()


class _Resumed(StreamingResponse):
    """The rest of a response whose start went out already: its body's pieces only."""

    def __init__(self, pieces: AsyncIterator[bytes], of: Response | None = None) -> None:
        super().__init__(pieces, background=None if of is None else of.background)

    async def stream_response(self, send: Send) -> None:
        async for chunk in self.body_iterator:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def _answer_of(exc: Exception) -> tuple[int, dict[str, object], str | None]:
    """The status, body and Retry-After the app's error handlers answer ``exc`` with."""
    return database_answer(exc) or (*exception_body(exc), None)


async def _error_frames(exc: Exception) -> AsyncIterator[bytes]:
    """The error frame and ``[DONE]`` for an error raised after the ``200``, logged once as
    the error handlers log theirs (a client gone meanwhile is told nothing)."""
    status, body, retry = _answer_of(exc)
    error = body["error"]
    assert isinstance(error, dict)
    message = getattr(exc, "log_message", None) or error["message"]
    if isinstance(exc, ClientDisconnected):
        log.info("%d after its stream began: %s", status, message)
        return
    if status < 500:
        log.info("%d after its stream began, sent as an error event: %s", status, message)
    else:  # the request failed, though its status says 200: its span says so
        note_late_error(status)
        log.warning(
            "%d after its stream began, sent as an error event: %s%s",
            status,
            message,
            causes(exc),
            exc_info=status == 500,
        )
    code = error.get("code") or str(status)
    yield sse.error_event(
        str(error["message"]), type=str(error["type"]), code=str(code), retry_after=retry
    )
    yield sse.DONE


async def _frames_of(response: Response) -> AsyncIterator[bytes]:
    """A response that is no stream, once the ``200`` went out: an error status as its error
    frame (with its code), else its body as it is."""
    if response.status_code < 400:
        yield bytes(response.body)
        return
    try:
        error = jsonio.loads_json(bytes(response.body))["error"]
        text, kind, code = str(error["message"]), str(error.get("type")), error.get("code")
    except (ValueError, KeyError, TypeError):
        text, kind, code = (
            bytes(response.body).decode("utf-8", "replace")[:2000],
            "upstream_error",
            None,
        )
    yield sse.error_event(text, type=kind, code=str(code or response.status_code))
    yield sse.DONE
