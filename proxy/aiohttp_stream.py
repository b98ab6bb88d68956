"""The aiohttp pool's transport: a streamed answer read as it arrives, over connections
with a bounded receive buffer.

aiohttp's reader raises a broken connection's error before handing over the bytes it holds,
so a stream that breaks off while nobody reads it (a busy client) would lose the answer's
last part. A streamed request (``STREAM_EXTENSION``) is therefore read as its bytes arrive
(``ReadAhead``): they move out of aiohttp's buffer into the stream's own at once, and the
error comes after them. Up to ``READ_AHEAD_BYTES`` are held for a client that reads slowly;
past that, reading pauses until the client catches up, so the provider is slowed down rather
than buffered (a break in that pause loses what aiohttp holds, at most its own buffer).
A whole answer is read at once anyway, and a break in it is an error whatever came before.
aiohttp reads a socket as soon as it is readable, so Linux would grow a provider connection's
receive buffer to many megabytes for a client that stalls; each connection's buffer is set
to ``RECEIVE_BUFFER_BYTES`` instead, so a stalled client slows the provider down after about
a megabyte in all (``tests/unit/test_relay_backpressure.py``).

An answer that is not valid HTTP is a transport error, as httpx's own transport makes it: a
malformed head (``ClientResponseError``, which httpx-aiohttp does not map) is raised as
``httpx.RemoteProtocolError``, and a body whose framing breaks mid-way (a bad chunk size)
ends with a ``ClientPayloadError`` when the connection closes (``fail_if_cut``): aiohttp keeps
that parse error on the connection and stops timing its reads, so the body would otherwise
wait for bytes that never come (``tests/unit/test_transport_malformed.py``). aiohttp's
pure-Python parser raises that error itself, as no ``ClientError``: it becomes the same
``ClientPayloadError`` (``MappedBody``, ``ReadAhead``).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import socket
import weakref
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = [
    "NOT_HTTP",
    "READ_AHEAD_BYTES",
    "RECEIVE_BUFFER_BYTES",
    "STREAM_EXTENSION",
    "MappedBody",
    "ReadAhead",
    "fail_if_cut",
    "provider_socket",
    "read_ahead_transport",
]

STREAM_EXTENSION = "cascade.stream"  # request extension: the body is relayed as it arrives
READ_AHEAD_BYTES = 1 << 18
"""How much of a streamed answer is read ahead of a slow client before reading pauses."""
RECEIVE_BUFFER_BYTES = 1 << 18
"""The kernel's receive buffer for each aiohttp connection to a provider (it doubles it)."""


NOT_HTTP = "the provider's answer is not valid HTTP"


def _first_line(message: object) -> str:
    """aiohttp's parse error in a few words, up to its first colon: never the bytes it
    quotes after it (a header line too long, a bad status line), which may hold a secret."""
    return str(message).strip().partition(":")[0].partition("\n")[0][:80]


_READING: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""Each watched connection's protocol and the body last read over it."""


def fail_if_cut(response: Any) -> None:
    """End ``response``'s body (an aiohttp ``ClientResponse``'s ``content``) with a
    ``ClientPayloadError`` if its connection closes before the body ended or failed: what a
    parse error in the body leaves it (the error stays on the connection's protocol, and the
    read timeout is dropped). A kept-alive connection gets one watch, whatever number of
    answers it carries."""
    content, connection = response.content, response.connection
    protocol = connection.protocol if connection is not None else None  # none: a body read
    if protocol is None or content.is_eof():
        return
    closed = protocol.closed
    if closed is None:  # the connection is gone already
        _cut(content, protocol)
        return
    if protocol not in _READING:
        closed.add_done_callback(functools.partial(_closed, protocol))
    _READING[protocol] = content


def _closed(protocol: Any, closed: asyncio.Future[None]) -> None:
    if not closed.cancelled():
        closed.exception()  # a reset is the body's reader's to report, not asyncio's log's
    content = _READING.pop(protocol, None)
    if content is not None:
        _cut(content, protocol)


def _cut(content: Any, protocol: Any) -> None:
    import aiohttp

    if content.is_eof() or content.exception() is not None:
        return
    failed = protocol.exception()
    why = _first_line(getattr(failed, "message", "") or failed or "connection closed")
    content.set_exception(aiohttp.ClientPayloadError(f"{NOT_HTTP} ({why})"))


def _as_client_error(exc: BaseException) -> BaseException:
    """A body's framing error as the C parser leaves it, a ``ClientPayloadError``: aiohttp's
    pure-Python parser (no C extension, ``AIOHTTP_NO_EXTENSIONS``) raises its own
    ``HttpProcessingError``, no ``ClientError``, which httpx-aiohttp would pass on unmapped.
    Its class names it: its message quotes the provider's bytes."""
    import aiohttp
    from aiohttp.http_exceptions import HttpProcessingError

    if isinstance(exc, HttpProcessingError):
        return aiohttp.ClientPayloadError(f"{NOT_HTTP} ({type(exc).__name__})")
    return exc


class MappedBody(httpx.AsyncByteStream):
    """httpx-aiohttp's stream of a whole answer, a body's framing error raised as the
    transport error it is over either of aiohttp's parsers (``_as_client_error``)."""

    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        from aiohttp.http_exceptions import HttpProcessingError
        from httpx_aiohttp.transport import map_aiohttp_exceptions

        try:
            async for chunk in self._inner:
                yield chunk
        except HttpProcessingError as exc:
            with map_aiohttp_exceptions():
                raise _as_client_error(exc) from exc

    async def aclose(self) -> None:
        await self._inner.aclose()


class ReadAhead(httpx.AsyncByteStream):
    """An aiohttp answer's body, moved into this stream's buffer as it arrives.

    A task reads aiohttp's ``StreamReader`` with ``readany`` (everything it holds at each
    wake-up), so every byte that came before a break is here when the break's error is
    raised, after them. The task pauses while ``limit`` bytes wait for the reader.
    """

    def __init__(self, content: Any, inner: httpx.AsyncByteStream, limit: int) -> None:
        self._content = content  # aiohttp's StreamReader
        self._inner = inner  # httpx-aiohttp's stream: closing it releases the connection
        self._limit = limit
        self._chunks: deque[bytes] = deque()
        self._held = 0
        self._error: BaseException | None = None
        self._done = False
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                await self._room.wait()
                chunk = await self._content.readany()
                if not chunk:
                    break
                self._chunks.append(chunk)
                self._held += len(chunk)
                if self._held >= self._limit:
                    self._room.clear()
                self._arrived.set()
        except asyncio.CancelledError:
            pass  # aclose: nobody reads on
        except Exception as exc:  # handed to the reader after the bytes before it
            self._error = _as_client_error(exc)
        finally:
            self._done = True
            self._arrived.set()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            if self._chunks:
                chunk = self._chunks.popleft()  # as it came: a reader may count chunks
                self._held -= len(chunk)
                if self._held < self._limit:
                    self._room.set()
                yield chunk
            elif self._done:
                if self._error is not None:
                    from httpx_aiohttp.transport import map_aiohttp_exceptions

                    with map_aiohttp_exceptions():
                        raise self._error
                return
            else:
                self._arrived.clear()
                await self._arrived.wait()

    async def aclose(self) -> None:
        # Nothing is awaited before the inner close: aclose often runs in a cancelled scope
        # (a client that hung up), where the first await would end it and leave the
        # provider's connection open. The cancelled task ends on its next wake-up.
        self._task.cancel()
        await self._inner.aclose()


_ANSWERED: contextvars.ContextVar[list[Any]] = contextvars.ContextVar("cascade_answered")
"""Where :func:`_answered` puts the aiohttp response of the request its task sends."""


async def _answered(session: Any, context: Any, params: Any) -> None:
    """aiohttp's ``on_request_end`` trace: the request's response, for the transport that
    sent it in this task (httpx-aiohttp keeps it in its stream, under a private name)."""
    if (answers := _ANSWERED.get(None)) is not None:
        answers.append(params.response)


def provider_socket(addr_info: Any) -> socket.socket:
    """The socket of each connection to a provider (aiohttp's ``socket_factory``), its
    receive buffer fixed at ``RECEIVE_BUFFER_BYTES``: Linux grows an eagerly read one's."""
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
    return sock


def read_ahead_transport() -> type[httpx.AsyncBaseTransport]:
    """``AiohttpTransport`` whose streamed answers are read ahead (``ReadAhead``) over
    connections with a bounded receive buffer (``RECEIVE_BUFFER_BYTES``)."""
    try:
        import aiohttp
        from httpx_aiohttp import AiohttpTransport
    except ImportError as exc:
        raise RuntimeError(
            "CASCADE_HTTP_TRANSPORT=aiohttp needs httpx-aiohttp: pip install httpx-aiohttp"
        ) from exc

    class ReadAheadTransport(AiohttpTransport):
        def get_client(self) -> aiohttp.ClientSession:
            connector = aiohttp.TCPConnector(
                limit=self.limits.max_connections or 0,
                keepalive_timeout=self.limits.keepalive_expiry,
                ssl=self.ssl_context,
                socket_factory=provider_socket,
            )
            trace = aiohttp.TraceConfig()
            trace.on_request_end.append(_answered)
            # No cookie jar: the client is every tenant's (see ``build_client``).
            return aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trace_configs=[trace]
            )

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            answers: list[Any] = []
            token = _ANSWERED.set(answers)
            try:
                response = await super().handle_async_request(request)
            except aiohttp.ClientResponseError as exc:  # a head that is not HTTP
                why = _first_line(exc.message)
                raise httpx.RemoteProtocolError(f"{NOT_HTTP} ({why})", request=request) from exc
            finally:
                _ANSWERED.reset(token)
            inner = response.stream
            assert isinstance(inner, httpx.AsyncByteStream)
            (answer,) = answers  # no redirect is followed: one request, one answer
            content = answer.content
            fail_if_cut(answer)
            if request.extensions.get(STREAM_EXTENSION):
                response.stream = ReadAhead(content, inner, READ_AHEAD_BYTES)
            else:
                response.stream = MappedBody(inner)
            return response

    return ReadAheadTransport
