"""A small keep-alive HTTP/1.1 client for provider calls: asyncio streams of bytes, parsed by
``httptools`` (llhttp, the parser uvicorn serves with).

Why not aiohttp, which served here before: its request path builds a request object, a
multidict of headers, a URL, timers and tracing hooks per call, and it was the largest single
piece of Cascade's CPU on a small request. bench/overhead's tiny request at concurrency 32,
alternating 8 s runs of ``bench.loadgen`` (README, Performance): proxy CPU 0.92-1.01 ms per
request with aiohttp, 0.75-0.79 with a first cut of this client.

What it does: one pool of idle connections per (scheme, host, port), TLS with the system's
trust store, a connect timeout, a read timeout that bounds each wait for bytes (never the
whole answer, so a long stream that keeps sending is not cut), bodies framed by length, by
chunks or by the end of the connection, and back-pressure: it stops reading from a provider
whose bytes the reader has not taken (past 1 MiB buffered).

What it does not do, as the aiohttp session it replaces did not: follow redirects (the caller
turns a 3xx into a 502), read proxy settings from the environment, keep cookies. It sends no
``Accept-Encoding``, so providers answer uncompressed and the bytes relayed are the bytes
sent. An idle connection is kept ``IDLE_SECONDS`` (15 s, aiohttp's default). A request sent on
a kept connection that the provider closes before answering a single byte (it closed the idle
connection as the request went out) is sent once more on a new connection; any other failure
is the caller's.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import httptools

__all__ = ["H1Client", "H1Response", "ProviderConnectionError", "IDLE_SECONDS"]

IDLE_SECONDS = 15.0
MAX_IDLE_PER_HOST = 128
_HIGH_WATER = 1 << 20  # bytes buffered before reading from the provider pauses


class ProviderConnectionError(ConnectionError):
    """The provider's connection broke, or it sent something that is not HTTP/1.1."""


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int
    prefix: str  # the base URL's path, without a trailing slash
    host_header: str


_ORIGINS: dict[str, _Origin] = {}


def _origin(base_url: str) -> _Origin:
    found = _ORIGINS.get(base_url)
    if found is None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ProviderConnectionError(f"not an http(s) URL: {u.scheme}://{u.hostname}")
        default = 443 if u.scheme == "https" else 80
        port = u.port or default
        name = f"[{u.hostname}]" if ":" in u.hostname else u.hostname
        found = _Origin(u.scheme, u.hostname, port, u.path.rstrip("/"),
                        name if port == default else f"{name}:{port}")
        if len(_ORIGINS) < 1024:
            _ORIGINS[base_url] = found
    return found


def _field(value: str) -> bytes:
    if "\r" in value or "\n" in value or "\0" in value:
        raise ProviderConnectionError("a request header holds a line break")
    try:
        return value.encode("latin-1")  # a client's header: the bytes it sent (see uvicorn)
    except UnicodeEncodeError:
        return value.encode("utf-8")


def _head(method: str, target: str, host: str, headers: Mapping[str, str],
          length: int | None) -> bytes:
    parts = [f"{method} {target} HTTP/1.1\r\nhost: {host}\r\n".encode("latin-1")]
    for name, value in headers.items():
        parts += (_field(name), b": ", _field(value), b"\r\n")
    if length is not None:
        parts.append(b"content-length: %d\r\n" % length)
    parts.append(b"\r\n")
    return b"".join(parts)


class _Conn(asyncio.Protocol):
    """One connection and the response being read on it (httptools calls the ``on_*``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self.begin()

    def begin(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = self.complete = self.framed = self.paused = self.keep_alive = False
        self.error: BaseException | None = None
        self.chunks: list[bytes] = []
        self.buffered = self.received = 0
        self.waiter: asyncio.Future[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.read_timeout = 0.0
        self.last_data = self.loop.time()

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        self.last_data = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(ProviderConnectionError(f"the provider's answer is not HTTP/1.1 ({exc})"))
            self.transport.close()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_done and not self.framed and not self.complete and self.error is None:
            self.on_message_complete()  # a body that runs to the end of the connection
        elif not self.complete:
            self.fail(ProviderConnectionError("the provider closed the connection"))

    # -- httptools callbacks
    def _after_end(self) -> bool:
        """A second answer after the one asked for (in the same read): retire the connection
        and drop it, so it never mixes into this answer or the next request's."""
        if self.complete:
            self.closed = True
            self.transport.close()  # type: ignore[union-attr]
        return self.complete

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._after_end():
            return
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")  # one character per byte, relayed as those bytes
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text
        if key in ("content-length", "transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        if self._after_end():
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (103 Early Hints): the real one follows
            self.headers = {}
            self.framed = False
            return
        self.status = status
        self.head_done = True
        self.wake()

    def on_body(self, body: bytes) -> None:
        if self._after_end():
            return
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.paused:
            self.paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]
        self.wake()

    def on_message_complete(self) -> None:
        if not self.head_done or self._after_end():
            return  # the end of an interim answer, or of a stray one
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # known only until the next message
        self.stop_timer()
        self.wake()

    # -- waiting
    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def fail(self, exc: BaseException) -> None:
        if self.error is None and not self.complete:
            self.error = exc
            self.stop_timer()
            self.wake()

    def start_timer(self, read_timeout: float) -> None:
        self.read_timeout = read_timeout
        self.last_data = self.loop.time()
        self.timer = self.loop.call_at(self.last_data + read_timeout, self._on_timer)

    def stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _on_timer(self) -> None:
        due = self.last_data + self.read_timeout
        if self.paused or self.loop.time() < due:  # bytes came since, or the reader is slow
            base = self.loop.time() if self.paused else self.last_data
            self.timer = self.loop.call_at(base + self.read_timeout, self._on_timer)
            return
        self.timer = None
        self.fail(TimeoutError(f"no bytes from the provider for {self.read_timeout:g} s"))
        self.closed = True
        self.transport.close()  # type: ignore[union-attr]

    async def wait(self) -> None:
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def take(self) -> bytes:
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks = []
        self.buffered = 0
        if self.paused:
            self.paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]
        return data


class H1Response:
    """A provider's answer once its status line and headers are in; read or stream the body,
    then ``release`` (a fully read body hands the connection back for the next request)."""

    def __init__(self, client: H1Client, conn: _Conn, key: tuple[str, str, int],
                 url: str) -> None:
        self._client, self._conn, self._key = client, conn, key
        self.status = conn.status
        self.headers: Mapping[str, str] = conn.headers
        self.url = url

    async def read(self) -> bytes:
        conn = self._conn
        parts: list[bytes] = []
        while not conn.complete and conn.error is None:
            if conn.paused:
                parts.append(conn.take())  # and read on
            await conn.wait()
        if conn.error is not None:
            raise conn.error
        parts.append(conn.take())
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Each piece as it arrives; on a break, what arrived before it first, then the error."""
        conn = self._conn
        while True:
            if conn.chunks:
                yield conn.take()
            elif conn.complete:
                return
            elif conn.error is not None:
                raise conn.error
            else:
                await conn.wait()

    def release(self) -> None:
        conn, self._conn = self._conn, None  # type: ignore[assignment]
        if conn is not None:
            self._client.give_back(self._key, conn)


class H1Client:
    """Provider requests over pooled keep-alive connections (see the module docstring)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._ssl = ssl_context
        self._closed = False

    def _tls(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def request(
        self, method: str, base_url: str, path: str, *, headers: Mapping[str, str],
        body: bytes | None, params: Iterable[tuple[str, str]] | None = None,
        connect_timeout: float | None, read_timeout: float,
    ) -> H1Response:
        """Send and return once the status line and headers are in."""
        o = _origin(base_url)
        target = o.prefix + path
        if params:
            target += "?" + urlencode(list(params))
        message = _head(method, target, o.host_header, headers,
                        len(body) if body is not None else None)
        if body:
            message += body
        key = (o.scheme, o.host, o.port)
        url = f"{o.scheme}://{o.host_header}{target}"
        conn = self._pooled(key)
        if conn is not None:
            try:
                await self._exchange(conn, message, read_timeout)
                return H1Response(self, conn, key, url)
            except ProviderConnectionError:
                if conn.received:
                    raise  # the provider began to answer: sending again could repeat it
        conn = await self._connect(o, connect_timeout)
        await self._exchange(conn, message, read_timeout)
        return H1Response(self, conn, key, url)

    def _pooled(self, key: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.transport.close()  # type: ignore[union-attr]
        return None

    async def _connect(self, o: _Origin, timeout: float | None) -> _Conn:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(timeout):
            _, conn = await loop.create_connection(
                lambda: _Conn(loop), o.host, o.port,
                ssl=self._tls() if o.scheme == "https" else None,
                server_hostname=o.host if o.scheme == "https" else None,
            )
        return conn

    @staticmethod
    async def _exchange(conn: _Conn, message: bytes, read_timeout: float) -> None:
        conn.begin()
        conn.start_timer(read_timeout)
        try:
            conn.transport.write(message)  # type: ignore[union-attr]
            while not conn.head_done and conn.error is None:
                await conn.wait()
        except BaseException:
            conn.stop_timer()
            conn.closed = True
            conn.transport.close()  # type: ignore[union-attr]
            raise
        if conn.error is not None:
            conn.closed = True
            conn.transport.close()  # type: ignore[union-attr]
            raise conn.error

    def give_back(self, key: tuple[str, str, int], conn: _Conn) -> None:
        conn.stop_timer()
        # keep_alive: the answer arrived to its end and the provider keeps the connection
        keep = conn.keep_alive and not conn.closed and not self._closed
        idle = self._idle.setdefault(key, [])
        if keep and len(idle) < MAX_IDLE_PER_HOST:
            conn.idle_since = conn.loop.time()
            idle.append(conn)
        else:
            conn.closed = True
            conn.transport.close()  # type: ignore[union-attr]

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.transport.close()  # type: ignore[union-attr]
        self._idle.clear()
