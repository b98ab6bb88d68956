"""A small keep-alive HTTP/1.1 client for provider calls: asyncio streams of bytes, parsed by
``httptools`` (llhttp, the parser uvicorn serves with).

Why not aiohttp, which served here before: its request path builds a request object, a
multidict of headers, a URL, timers and tracing hooks per call, and it was the largest single
piece of Cascade's CPU on a small request. bench/overhead's tiny request at concurrency 32,
alternating 8 s runs of ``bench.loadgen`` (README, Performance): proxy CPU 0.92-1.01 ms per
request with aiohttp, 0.80-0.84 with this client.

What it does: one pool of idle connections per (scheme, host, port), TLS with the system's
trust store, a connect timeout, a read timeout that bounds each wait for bytes (never the
whole answer, so a long stream that keeps sending is not cut), bodies framed by length, by
chunks or by the end of the connection, and back-pressure: it stops reading from a provider
whose bytes the reader has not taken (past 1 MiB buffered); time paused so is the reader's, not
counted against the provider. An answer dropped without ``release`` closes its connection.

What it does not do, as the aiohttp session it replaces did not: follow redirects (the caller
turns a 3xx into a 502), read proxy settings from the environment, keep cookies. It sends no
``Accept-Encoding``, so providers answer uncompressed and the bytes relayed are the bytes
sent. An idle connection is kept ``IDLE_SECONDS`` (15 s, aiohttp's default). A request sent on
a kept connection that the provider closes before answering a single byte (it closed the idle
connection as the request went out) is sent once more on a new connection when its method is
idempotent (RFC 9112 9.3.1, as aiohttp does); a chat completion is a POST, which the provider
may have started to work on, so its caller gets the 502 (OpenAI's SDKs retry those).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlencode, urlsplit

import httptools

__all__ = ["H1Client", "H1Response", "ProviderConnectionError", "IDLE_SECONDS"]

IDLE_SECONDS = 15.0
MAX_IDLE_PER_HOST = 128
_HIGH_WATER = 1 << 20  # bytes buffered before reading from the provider pauses
_IDEMPOTENT = frozenset({"GET", "OPTIONS", "PUT", "DELETE"})  # HEAD is never sent


class ProviderConnectionError(ConnectionError):
    """The provider's connection broke, or it sent something that is not HTTP/1.1."""


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int
    prefix: str  # the base URL's path, percent-encoded, without a trailing slash
    host_header: str
    auth: str | None  # Basic credentials from the URL's user:password, if it has them


_ORIGINS: dict[str, _Origin] = {}


def _parse(base_url: str) -> _Origin:
    u = urlsplit(base_url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError("not an http(s) URL")
    host = u.hostname.encode("idna").decode("ascii")
    default = 443 if u.scheme == "https" else 80
    port = u.port if u.port is not None else default  # ValueError when out of range
    name = f"[{host}]" if ":" in host else host
    auth = None
    if u.username is not None:
        pair = f"{unquote(u.username)}:{unquote(u.password or '')}".encode()
        auth = "Basic " + base64.b64encode(pair).decode("ascii")
    return _Origin(u.scheme, host, port, quote(u.path.rstrip("/"), safe="/%:@!$&'()*+,;=~"),
                   name if port == default else f"{name}:{port}", auth)


def _origin(base_url: str) -> _Origin:
    found = _ORIGINS.get(base_url)
    if found is None:
        try:
            found = _parse(base_url)
        except (ValueError, UnicodeError) as exc:  # the message names no part of the URL
            raise ProviderConnectionError(
                f"the provider's baseUrl is not a usable http(s) URL ({type(exc).__name__})"
            ) from None
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

    def retire(self) -> None:
        """Never use this connection again: stop its timer and close it."""
        self.closed = True
        self.stop_timer()
        self.transport.close()  # type: ignore[union-attr]

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.complete:  # nothing legitimate comes between an answer and the next request
            self.retire()
            return
        self.received += len(data)
        self.last_data = self.loop.time()
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:  # upgrade: 101
            self.fail(ProviderConnectionError(f"the provider's answer is not HTTP/1.1 ({exc})"))
            self.retire()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.complete or self.error is not None:
            return
        if exc is None and self.head_done and not self.framed:
            self.on_message_complete()  # a body that runs to a clean end of the connection
            return
        error = ProviderConnectionError(
            "the provider closed the connection" if exc is None
            else f"the provider's connection broke ({type(exc).__name__})")
        error.__cause__ = exc
        self.fail(error)

    # -- httptools callbacks
    def _after_end(self) -> bool:
        """A second answer after the one asked for (in the same read): retire the connection
        and drop it, so it never mixes into this answer or the next request's."""
        if self.complete:
            self.retire()
        return self.complete

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head_done or self._after_end():
            return  # a chunked body's trailer fields are not headers
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")  # one character per byte, relayed as those bytes
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text
        if key == "content-length" or (
            key == "transfer-encoding" and text.rstrip().lower().endswith("chunked")
        ):
            self.framed = True  # else the body runs to the end of the connection

    def on_headers_complete(self) -> None:
        if self._after_end():
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (103 Early Hints): the real one follows
            # (a 101 ends the parse with HttpParserUpgrade, with or without an Upgrade header)
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
        """No byte for ``read_timeout`` while reading: the provider has gone silent. Time
        spent paused is the reader's (a client reading a stream slowly), not the provider's."""
        due = self.last_data + self.read_timeout
        if self.paused or self.loop.time() < due:
            base = self.loop.time() if self.paused else self.last_data
            self.timer = self.loop.call_at(base + self.read_timeout, self._on_timer)
            return
        self.timer = None
        self.fail(TimeoutError(f"no bytes from the provider for {self.read_timeout:g} s"))
        self.retire()

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

    def __del__(self) -> None:
        # An answer dropped unreleased (a caller's bug) must not hold its socket open, paused,
        # for as long as the process lives.
        conn = self._conn
        if conn is not None and not conn.closed and conn.transport is not None:
            conn.retire()


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
        if o.auth is not None and "authorization" not in headers:
            headers = {**headers, "authorization": o.auth}
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
                if conn.received or method not in _IDEMPOTENT:
                    raise  # the provider may have acted on it: sending again could repeat it
        conn = await self._connect(o, connect_timeout)
        await self._exchange(conn, message, read_timeout)
        return H1Response(self, conn, key, url)

    def _pooled(self, key: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            if (not conn.closed and not conn.transport.is_closing()  # type: ignore[union-attr]
                    and now - conn.idle_since < IDLE_SECONDS):
                return conn
            conn.retire()
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
            conn.retire()
            raise
        if conn.error is not None:
            conn.retire()
            raise conn.error

    def give_back(self, key: tuple[str, str, int], conn: _Conn) -> None:
        conn.stop_timer()
        # keep_alive: the answer arrived to its end and the provider keeps the connection
        keep = conn.keep_alive and not conn.closed and not self._closed
        idle = self._idle.setdefault(key, [])
        now = conn.loop.time()
        while idle and (idle[0].closed or now - idle[0].idle_since >= IDLE_SECONDS):
            idle.pop(0).retire()  # the longest idle, at the bottom: expired
        if keep and len(idle) < MAX_IDLE_PER_HOST:
            conn.take()  # drop what was never read, and read again: an idle connection must
            conn.idle_since = now  # hold no answer and must see the provider close it
            idle.append(conn)
        else:
            conn.retire()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.retire()
        self._idle.clear()
