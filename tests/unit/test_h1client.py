"""proxy.h1client against scripted HTTP servers on loopback (real sockets, real TLS)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trustme

from proxy import h1client
from proxy.h1client import H1Client, H1Response, ProviderConnectionError

Reader, Writer = asyncio.StreamReader, asyncio.StreamWriter
Handler = Callable[[Reader, Writer, int], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class Server:
    """A loopback server that runs ``handler(reader, writer, n)`` for its n-th connection."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler, self.tls = handler, tls
        self.connections = 0
        self.requests: list[bytes] = []

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def answer_all(self, reader: Reader, writer: Writer, answer: bytes = OK) -> None:
        """Answer every further request on this connection with ``answer``."""
        while await self.request(reader) is not None:
            writer.write(answer)
            await writer.drain()

    async def request(self, reader: asyncio.StreamReader) -> bytes | None:
        """One whole request (head and content-length body), or None at end of stream."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        whole = head + await reader.readexactly(length)
        self.requests.append(whole)
        return whole

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/v1"


async def _open(client: H1Client, server: Server, *, read_timeout: float = 5.0,
                scheme: str = "http", connect_timeout: float = 5.0) -> H1Response:
    """POST an empty body to ``/x`` and return once the answer's head is in."""
    return await client.request("POST", server.url(scheme), "/x", headers={}, body=b"",
                                connect_timeout=connect_timeout, read_timeout=read_timeout)


async def _get(client: H1Client, server: Server, *, body: bytes | None = b"{}",
               read_timeout: float = 5.0, scheme: str = "http",
               method: str = "POST") -> tuple[int, bytes]:
    resp = await client.request(method, server.url(scheme), "/chat/completions",
                                headers={"authorization": "Bearer k"}, body=body,
                                connect_timeout=5.0, read_timeout=read_timeout)
    try:
        return resp.status, await resp.read()
    finally:
        resp.release()


def _zeros(size: int) -> bytes:
    """A 200 answer whose body is ``size`` zero bytes."""
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size + bytes(size)


async def _play(writer: Writer, *steps: bytes | float) -> None:
    """Write each bytes step (and drain), sleep each number of seconds, in order."""
    for step in steps:
        if isinstance(step, bytes):
            writer.write(step)
            await writer.drain()
        else:
            await asyncio.sleep(step)


def _answering(*answers: bytes, keep: bool = True) -> Callable[[Server], Handler]:
    """A handler that answers each request on a connection with the next of ``answers``."""
    def make(server: Server) -> Handler:
        async def handler(reader: Reader, writer: Writer, n: int) -> None:
            for answer in answers:
                if await server.request(reader) is None:
                    return
                writer.write(answer)
                await writer.drain()
            while keep and await server.request(reader) is not None:
                writer.write(answers[-1])
                await writer.drain()
        return handler
    return make


@pytest.fixture
async def client() -> AsyncIterator[H1Client]:
    made = H1Client()
    yield made
    await made.aclose()


def _serve(make: Callable[[Server], Handler], tls: ssl.SSLContext | None = None) -> Server:
    server = Server(None, tls)  # type: ignore[arg-type]
    server.handler = make(server)
    return server


async def test_requests_reuse_one_kept_connection(client: H1Client) -> None:
    async with _serve(_answering(OK)) as server:
        for _ in range(3):
            assert await _get(client, server) == (200, b"{}")
        assert server.connections == 1
        first = server.requests[0]
        assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
        assert f"host: 127.0.0.1:{server.port}\r\n".encode() in first
        assert b"authorization: Bearer k\r\n" in first and first.endswith(b"\r\n\r\n{}")


@pytest.mark.parametrize("answer, body", [
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
     b"abcde"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", b"hello"),
])
async def test_framed_bodies_are_read_whole(client: H1Client, answer: bytes,
                                            body: bytes) -> None:
    async with _serve(_answering(answer)) as server:
        assert await _get(client, server) == (200, body)
        assert await _get(client, server) == (200, body)
        assert server.connections == 1  # both framings leave the connection reusable


async def test_a_body_without_length_runs_to_the_end_of_the_connection(client: H1Client) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        await _play(writer, b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nto the", 0.05, b" end")

    async with Server(handler) as server:
        assert await _get(client, server) == (200, b"to the end")
        assert await _get(client, server) == (200, b"to the end")
        assert server.connections == 2  # a closed connection is never handed out again


async def test_connection_close_and_an_unread_body_are_not_reused(client: H1Client) -> None:
    closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}"
    async with _serve(_answering(closing, keep=False)) as server:
        await _get(client, server)
        await _get(client, server)
        assert server.connections == 2


async def test_a_half_read_stream_is_not_reused(client: H1Client) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        if n == 1:
            await server.request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.write(b"1\r\nb\r\n0\r\n\r\n")
            await writer.drain()
        await server.answer_all(reader, writer)

    async with Server(handler) as server:
        resp = await _open(client, server)
        async for chunk in resp.iter_chunks():
            assert chunk == b"a"
            break  # the rest is still on its way
        resp.release()
        assert await _get(client, server) == (200, b"{}")
        assert server.connections == 2


async def test_bytes_nobody_asked_for_retire_the_connection(client: H1Client) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        if n == 1:  # an answer, then a second one to no request
            writer.write(OK + b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nstale")
            await writer.drain()
            await asyncio.sleep(5)
        writer.write(OK)
        await writer.drain()

    async with Server(handler) as server:
        assert await _get(client, server) == (200, b"{}")
        await asyncio.sleep(0.1)
        assert await _get(client, server) == (200, b"{}")
        assert server.connections == 2


async def test_a_kept_connection_the_provider_dropped_is_replaced_once_for_a_get(
    client: H1Client,
) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(OK)
        await writer.drain()
        await server.request(reader)  # the next request: closed without an answer
        while n > 2 and await server.request(reader) is not None:
            writer.write(OK)
            await writer.drain()

    async with Server(handler) as server:
        assert await _get(client, server, method="GET", body=None) == (200, b"{}")
        assert await _get(client, server, method="GET", body=None) == (200, b"{}")
        assert server.connections == 2 and len(server.requests) == 3
        # a POST the provider may have begun to work on is never sent twice
        with pytest.raises(ProviderConnectionError):
            await _get(client, server)
        assert server.connections == 2 and len(server.requests) == 4
        assert await _get(client, server) == (200, b"{}")  # on a new connection


async def test_no_second_send_once_the_provider_began_to_answer(client: H1Client) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(OK)
        await writer.drain()
        await server.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-le")  # breaks off inside the head

    async with Server(handler) as server:
        await _get(client, server)
        with pytest.raises(ProviderConnectionError):
            await _get(client, server)
        assert server.connections == 1 and len(server.requests) == 2


async def test_a_stream_yields_what_arrived_before_a_break_then_raises(client: H1Client) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        await _play(writer, b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\ndata: 1\n\n", 0.05,
                    b"data: 2\n\n")
        writer.transport.abort()

    async with Server(handler) as server:
        resp = await _open(client, server)
        got = b""
        with pytest.raises(ProviderConnectionError):
            async for chunk in resp.iter_chunks():
                got += chunk
        resp.release()
        assert got == b"data: 1\n\ndata: 2\n\n"


async def test_the_read_timeout_bounds_each_wait_not_the_whole_answer(client: H1Client) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(6):  # 0.6 s in all, never 0.3 s without a byte
            await asyncio.sleep(0.1)
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
        if n == 1:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            await server.request(reader)
        await asyncio.sleep(5)  # the second answer stalls

    async with Server(handler) as server:
        assert await _get(client, server, read_timeout=0.3) == (200, b"x" * 6)
        with pytest.raises(TimeoutError):
            await _get(client, server, read_timeout=0.3)


async def test_a_provider_that_never_answers_the_handshake_times_out_connecting(
    client: H1Client,
) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await asyncio.sleep(5)  # accepts TCP, then says nothing: no TLS handshake

    async with Server(handler) as server:
        with pytest.raises(TimeoutError):
            await _open(client, server, scheme="https", connect_timeout=0.2)


async def test_tls_with_a_verified_certificate() -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    async with _serve(_answering(OK), tls=server_ctx) as server:
        client = H1Client(ssl_context=trusting)
        assert await _get(client, server, scheme="https") == (200, b"{}")
        await client.aclose()
        stranger = H1Client(ssl_context=ssl.create_default_context())  # does not trust the CA
        with pytest.raises(ssl.SSLCertVerificationError):
            await _get(stranger, server, scheme="https")
        await stranger.aclose()


async def test_a_slow_reader_pauses_the_provider_and_loses_nothing(client: H1Client) -> None:
    size = 4 << 20

    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
        writer.write(bytes(range(256)) * (size // 256))
        await writer.drain()

    async with Server(handler) as server:
        resp = await _open(client, server)
        await asyncio.sleep(0.3)  # the reader is busy elsewhere
        assert resp._conn.paused and resp._conn.buffered < size
        assert await resp.read() == bytes(range(256)) * (size // 256)
        resp.release()


async def test_interim_answers_are_skipped(client: H1Client) -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n"
    async with _serve(_answering(early + OK)) as server:
        resp = await _open(client, server)
        assert resp.status == 200 and "link" not in resp.headers
        assert await resp.read() == b"{}"
        resp.release()


async def test_header_values_keep_their_bytes_and_repeats_are_joined(client: H1Client) -> None:
    answer = ("HTTP/1.1 200 OK\r\nX-Request-Id: \u20ac\r\nx-ratelimit-a: 1\r\n"
              "X-Ratelimit-A: 2\r\ncontent-length: 0\r\n\r\n").encode()
    async with _serve(_answering(answer)) as server:
        resp = await client.request("GET", server.url(), "/models", headers={}, body=None,
                                    params=[("a", "1 2"), ("b", "&")],
                                    connect_timeout=5, read_timeout=5)
        await resp.read()
        resp.release()
        assert resp.headers["x-request-id"].encode("latin-1") == "\u20ac".encode()
        assert resp.headers["x-ratelimit-a"] == "1, 2"
        assert server.requests[0].startswith(b"GET /v1/models?a=1+2&b=%26 HTTP/1.1\r\n")
        assert b"content-length" not in server.requests[0]


async def test_bad_input_and_bad_answers_are_connection_errors(client: H1Client) -> None:
    async with _serve(_answering(b"SSH-2.0-OpenSSH_9.6\r\n")) as server:
        with pytest.raises(ProviderConnectionError, match="not HTTP/1.1"):
            await _get(client, server)
        with pytest.raises(ProviderConnectionError, match="line break"):
            await client.request("POST", server.url(), "/x", body=b"",
                                 headers={"user-agent": "a\r\nx-injected: 1"},
                                 connect_timeout=5, read_timeout=5)
        assert len(server.requests) == 1  # the injected header was never sent
    for url in ("ftp://127.0.0.1/v1", "http://127.0.0.1:99999/v1", "http://a..b/v1"):
        with pytest.raises(ProviderConnectionError, match="not a usable http"):
            await client.request("POST", url, "/x", headers={}, body=b"",
                                 connect_timeout=5, read_timeout=5)
    for switch in (b"upgrade: h2c\r\nconnection: upgrade\r\n", b""):  # named, or not
        async with _serve(_answering(b"HTTP/1.1 101 Switching Protocols\r\n" + switch
                                     + b"\r\n")) as server:
            with pytest.raises(ProviderConnectionError, match="not HTTP/1.1"):
                await _get(client, server, read_timeout=2)


async def test_a_base_url_path_is_escaped_and_its_credentials_sent(client: H1Client) -> None:
    async with _serve(_answering(OK)) as server:
        resp = await client.request(
            "GET", f"http://me:p%40ss@127.0.0.1:{server.port}/v1/d\u00e9p", "/models",
            headers={}, body=None, connect_timeout=5, read_timeout=5)
        await resp.read()
        resp.release()
        sent = server.requests[0]
        assert sent.startswith(b"GET /v1/d%C3%A9p/models HTTP/1.1\r\n")
        assert b"authorization: Basic bWU6cEBzcw==\r\n" in sent  # me:p@ss


async def test_a_body_to_the_end_that_breaks_off_is_an_error(client: H1Client) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        await _play(writer, b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n{\"choices\"", 0.05)
        if n == 1:  # a reset, not an end
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
        else:
            writer.write(b": []}")

    async with Server(handler) as server:
        with pytest.raises(ProviderConnectionError, match="broke") as info:
            await _get(client, server)
        assert isinstance(info.value.__cause__, ConnectionResetError)
        # a transfer coding that is not chunked runs to the end of the connection too
        assert await _get(client, server) == (200, b'{"choices": []}')


async def test_trailer_fields_are_not_headers(client: H1Client) -> None:
    answer = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
              b"transfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n"
              b"content-type: text/evil\r\nx-ratelimit-x: 1\r\n\r\n")
    async with _serve(_answering(answer)) as server:
        resp = await _open(client, server)
        assert await resp.read() == b"{}"
        resp.release()
        assert resp.headers["content-type"] == "application/json"
        assert "x-ratelimit-x" not in resp.headers


async def test_idle_connections_expire(client: H1Client,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(h1client, "IDLE_SECONDS", 0.0)
    async with _serve(_answering(OK)) as server:
        await _get(client, server)
        await _get(client, server)
        assert server.connections == 2


async def test_expired_connections_at_the_bottom_of_the_pool_are_closed(
    client: H1Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with _serve(_answering(OK)) as server:
        held = [await _open(client, server) for _ in range(3)]
        for resp in held:
            await resp.read()
        monkeypatch.setattr(h1client, "IDLE_SECONDS", 0.2)
        held[0].release()
        held[1].release()
        old = list(list(client._idle.values())[0])
        await asyncio.sleep(0.3)  # the two at the bottom expire
        held[2].release()  # a fresh one on top
        await _get(client, server)  # takes the fresh one; its release sweeps the bottom
        assert all(c.transport.is_closing() for c in old)
        assert len(list(client._idle.values())[0]) == 1 and server.connections == 3


async def test_a_paused_answer_released_whole_leaves_a_usable_connection(client: H1Client) -> None:
    async with _serve(_answering(_zeros((1 << 20) + 4096), OK)) as server:
        resp = await _open(client, server)
        while not resp._conn.complete:
            await asyncio.sleep(0.01)
        conn = resp._conn
        assert conn.paused
        resp.release()  # whole, never taken: the connection is kept, its bytes dropped
        assert not conn.paused and conn.buffered == 0 and not conn.chunks
        assert await _get(client, server, read_timeout=1) == (200, b"{}")
        assert server.connections == 1


async def test_time_paused_for_a_slow_reader_is_not_the_providers(client: H1Client) -> None:
    size = 4 << 20
    async with _serve(_answering(_zeros(size), OK)) as server:
        resp = await _open(client, server, read_timeout=0.3)
        await asyncio.sleep(0.8)  # the reader is slow: paused well past the read timeout
        assert resp._conn.paused and not resp._conn.transport.is_closing()
        assert await resp.read() == bytes(size)
        resp.release()


async def test_an_answer_dropped_unreleased_closes_its_connection(client: H1Client) -> None:
    async with _serve(_answering(OK)) as server:
        resp = await _open(client, server)
        conn = resp._conn
        del resp  # a caller that forgot to release it
        assert conn.closed and conn.transport.is_closing()
        assert await _get(client, server) == (200, b"{}")
        assert server.connections == 2


async def test_bytes_on_an_idle_connection_retire_it(client: H1Client) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(OK)
        await writer.drain()
        if n == 1:  # later, unasked, the start of some other answer; its rest after the
            await asyncio.sleep(0.05)  # next request, which it would pass for the answer to
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-le")
            await writer.drain()
            await server.request(reader)
            writer.write(b"ngth: 5\r\n\r\nSTRAY")
            await writer.drain()
        await server.answer_all(reader, writer)

    async with Server(handler) as server:
        assert await _get(client, server) == (200, b"{}")
        await asyncio.sleep(0.2)
        assert await _get(client, server) == (200, b"{}")
        assert server.connections == 2


async def test_junk_after_an_answer_retires_the_connection(client: H1Client) -> None:
    async with _serve(_answering(OK + b"\x00\x01 junk\r\n\r\n")) as server:
        assert await _get(client, server) == (200, b"{}")
        assert await _get(client, server) == (200, b"{}")  # on a new connection
        assert server.connections == 2
