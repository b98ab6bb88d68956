"""A provider whose answer is not valid HTTP, over both transports: a malformed head or a body
whose chunked framing breaks mid-way is a transport error the proxy maps to a 502, raised at
once, never an unhandled aiohttp error (a 500) or a read that waits for bytes that never come
(aiohttp keeps a body parser's error on the connection, not on the body being read)."""

from __future__ import annotations

import asyncio
import gc

import httpx
import pytest

from proxy.aiohttp_stream import fail_if_cut
from proxy.config import ProviderConfig
from proxy.errors import UpstreamBadResponse, UpstreamUnavailable
from proxy.transport import Kind, build_client
from proxy.upstream import Upstream
from tests.fakes.scripted import Reader, Server, Writer

KINDS = ["httpx", "aiohttp"]
CHUNK = b'data: {"choices": []}\n\n'
CHUNKED = b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n"
BOUND = 3.0  # far below the provider's read timeout: the break itself must end the read


def _chunked_then_garbage(ctype: bytes) -> Server:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(CHUNKED % ctype + b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
        await writer.drain()
        await asyncio.sleep(0.1)  # the valid part is read first, then the framing breaks
        writer.write(b"ZZZ\r\nnot a chunk\r\n")
        await writer.drain()
        writer.close()

    server = Server(handler)
    return server


def _provider(server: Server) -> ProviderConfig:
    return ProviderConfig(base_url=server.url(), timeout_seconds=60)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_stream_whose_chunked_framing_breaks_ends_with_an_error(kind: Kind) -> None:
    upstream = Upstream(build_client(kind=kind), env={})
    got = b""
    async with _chunked_then_garbage(b"text/event-stream") as server:
        answer = await upstream.open_stream(
            _provider(server), "/chat/completions", client_headers={}, content=b"{}"
        )

        async def read() -> None:
            nonlocal got
            async for chunk in answer.aiter_bytes():
                got += chunk

        with pytest.raises(httpx.TransportError):
            await asyncio.wait_for(read(), BOUND)
        await answer.aclose()
    await upstream.client.aclose()
    assert got == CHUNK


@pytest.mark.parametrize("kind", KINDS)
async def test_a_whole_answer_whose_chunked_framing_breaks_is_a_502(kind: Kind) -> None:
    upstream = Upstream(build_client(kind=kind), env={})
    async with _chunked_then_garbage(b"application/json") as server:
        call = upstream.call(_provider(server), "POST", "/chat/completions", client_headers={})
        with pytest.raises(UpstreamUnavailable, match="broke off"):
            await asyncio.wait_for(call, BOUND)
    await upstream.client.aclose()


async def test_answers_that_end_leave_nothing_on_their_kept_alive_connection() -> None:
    """A connection kept alive for many answers holds one watch, not one per answer."""
    import aiohttp

    body = b'{"ok": true}'

    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        while await server.request(reader) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
            await writer.drain()
            await asyncio.sleep(0.01)  # the body comes after the head: it is watched
            writer.write(body)

    server = Server(handler)
    protocols = set()
    async with server, aiohttp.ClientSession() as session:
        for _ in range(20):
            async with session.post(server.url() + "/chat/completions", data=b"{}") as resp:
                fail_if_cut(resp)
                protocols.add(resp.connection.protocol)
                assert await resp.read() == body
        assert server.connections == 1 and len(protocols) == 1
        closed = protocols.pop()._closed
        assert closed is not None and not closed.done() and len(closed._callbacks) == 1


HEADS = {
    "not HTTP": b"SSH-2.0-OpenSSH_9.6\r\n",
    "bad status line": b"HTTP/1.1 abc OK\r\ncontent-length: 2\r\n\r\n{}",
    "status below 100": b"HTTP/1.1 99 X\r\ncontent-length: 2\r\n\r\n{}",
    "bad content-length": b"HTTP/1.1 200 OK\r\ncontent-length: abc\r\n\r\n{}",
    "a header line too long": b"HTTP/1.1 200 OK\r\nx-key: sk-" + b"s" * 20000 + b"\r\n\r\n{}",
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("head", list(HEADS.values()), ids=list(HEADS))
async def test_an_answer_whose_head_is_not_http_is_a_502(kind: Kind, head: bytes) -> None:
    if kind == "httpx" and len(head) > 8192:
        pytest.skip("httpx's transport reads a longer head line than aiohttp's 8190 bytes")

    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(head)
        await writer.drain()
        writer.close()

    server = Server(handler)
    upstream = Upstream(build_client(kind=kind), env={})
    async with server:
        call = upstream.call(_provider(server), "POST", "/chat/completions", client_headers={})
        with pytest.raises(UpstreamUnavailable) as info:
            await asyncio.wait_for(call, BOUND)
        assert "sk-" not in str(info.value)  # the provider's bytes are not quoted
        with pytest.raises(UpstreamUnavailable):
            await upstream.open_stream(
                _provider(server), "/chat/completions", client_headers={}, content=b"{}"
            )
    await upstream.client.aclose()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [600, 999])
async def test_a_status_past_599_is_a_502_not_relayed(kind: Kind, status: int) -> None:
    """HTTP's statuses end at 599: the ASGI server cannot send a 999 (the client would see
    its connection dropped), so the proxy answers for the provider."""

    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(b"HTTP/1.1 %d Odd\r\ncontent-length: 2\r\n\r\n{}" % status)
        await writer.drain()
        writer.close()

    server = Server(handler)
    upstream = Upstream(build_client(kind=kind), env={})
    async with server:
        call = upstream.call(_provider(server), "POST", "/chat/completions", client_headers={})
        with pytest.raises(UpstreamBadResponse, match=f"answered {status}"):
            await asyncio.wait_for(call, BOUND)
        with pytest.raises(UpstreamBadResponse):
            await upstream.open_stream(
                _provider(server), "/chat/completions", client_headers={}, content=b"{}"
            )
    await upstream.client.aclose()


async def test_a_reset_of_a_watched_connection_leaves_no_unretrieved_error() -> None:
    """The watch reads the closing's error: asyncio would log each reset at ERROR."""
    import socket
    import struct

    import aiohttp

    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(b"{}")
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    seen: list[dict] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    server = Server(handler)
    try:
        async with server, aiohttp.ClientSession() as session:
            async with session.post(server.url() + "/x", data=b"{}") as resp:
                fail_if_cut(resp)
                assert await resp.read() == b"{}"
            await asyncio.sleep(0.2)  # the reset arrives while the connection is kept
            del resp  # it holds the connection's protocol, which holds the future
            async with session.post(server.url() + "/x", data=b"{}") as again:
                await again.read()  # the pool drops the reset connection for a new one
            gc.collect()
            await asyncio.sleep(0)
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert not [c for c in seen if "never retrieved" in c.get("message", "")], seen


@pytest.fixture
def python_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp's pure-Python parser (no C extension, or ``AIOHTTP_NO_EXTENSIONS``), which
    raises a body's framing error itself, an ``HttpProcessingError`` and no ``ClientError``."""
    import aiohttp.client_proto
    import aiohttp.http_parser

    parser = aiohttp.http_parser.HttpResponseParserPy
    monkeypatch.setattr(aiohttp.client_proto, "HttpResponseParser", parser)


@pytest.mark.usefixtures("python_parser")
async def test_a_broken_chunked_body_is_a_transport_error_with_aiohttps_python_parser() -> None:
    await test_a_stream_whose_chunked_framing_breaks_ends_with_an_error("aiohttp")
    await test_a_whole_answer_whose_chunked_framing_breaks_is_a_502("aiohttp")
