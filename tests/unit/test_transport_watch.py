"""``fail_if_cut`` on healthy connections, against a loopback provider over aiohttp: a watch
never fails a body that ended (a kept-alive connection's next answer, a provider that closes
after a whole body, an HTTP/1.0 body read to the close, an idle pooled connection closed) and
no watch outlives its connection."""

from __future__ import annotations

import asyncio

import pytest

from proxy import aiohttp_stream
from proxy.aiohttp_stream import fail_if_cut
from proxy.config import ProviderConfig
from proxy.transport import build_client
from proxy.upstream import Upstream
from tests.fakes.scripted import Reader, Server, Writer

BODY = b'{"ok": true}'
SSE = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'


def _provider(server: Server) -> ProviderConfig:
    return ProviderConfig(base_url=server.url(), timeout_seconds=60)


async def _read_stream(upstream: Upstream, server: Server) -> bytes:
    answer = await upstream.open_stream(
        _provider(server), "/chat/completions", client_headers={}, content=b"{}"
    )
    got = b""
    try:
        async for piece in answer.aiter_bytes():
            got += piece
    finally:
        await answer.aclose()
    return got


async def _call(upstream: Upstream, server: Server) -> bytes:
    answer = await upstream.call(_provider(server), "POST", "/chat/completions", client_headers={})
    return answer.content


HEADS = {
    "keep-alive": b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n",
    "connection close": b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n",
    "HTTP/1.0 to the close": b"HTTP/1.0 200 OK\r\n\r\n",
    "chunked": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("head", list(HEADS.values()), ids=list(HEADS))
async def test_a_body_that_ended_is_never_failed_by_its_watch(head: bytes, stream: bool) -> None:
    body = SSE if stream else BODY

    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        for _ in range(3):
            if await server.request(reader) is None:
                return
            writer.write(head % len(body) if b"%d" in head else head)
            await writer.drain()
            await asyncio.sleep(0.02)  # the body comes after the head: it is watched
            if b"chunked" in head:
                writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
            else:
                writer.write(body)
            await writer.drain()
            if b"close" in head or b"HTTP/1.0" in head:
                writer.close()  # at once after the whole body
                return
        await asyncio.sleep(0.05)
        writer.close()  # an idle kept-alive connection closed by the provider

    server = Server(handler)
    upstream = Upstream(build_client(kind="aiohttp"), env={})
    async with server:
        for _ in range(3):
            got = await (_read_stream if stream else _call)(upstream, server)
            assert got == body
            await asyncio.sleep(0.1)  # a close after the body lands while nothing reads
        await asyncio.sleep(0.1)
        assert not aiohttp_stream._READING  # every closed connection's watch is gone
    await upstream.client.aclose()


async def test_a_watch_ends_with_its_connection_whether_pooled_or_cut_short() -> None:
    """A connection left in the pool until the client closes, and one closed with its body
    unread (a client that hangs up), each drop their watch."""

    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        while await server.request(reader) is not None:
            writer.write(HEADS["keep-alive"] % len(SSE))
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(SSE)
            await writer.drain()

    server = Server(handler)
    upstream = Upstream(build_client(kind="aiohttp"), env={})
    async with server:
        assert await _read_stream(upstream, server) == SSE  # kept in the pool
        assert len(aiohttp_stream._READING) == 1
        answer = await upstream.open_stream(  # over the pooled connection again
            _provider(server), "/chat/completions", client_headers={}, content=b"{}"
        )
        await answer.aclose()  # before its body came: aiohttp closes the connection
        await asyncio.sleep(0.05)
        await upstream.client.aclose()
        await asyncio.sleep(0.05)
    assert not aiohttp_stream._READING


async def test_the_aiohttp_internals_the_watch_reads_are_there() -> None:
    """``fail_if_cut`` reads the connection's protocol (``ClientResponse.connection``,
    ``Connection.protocol``) and the protocol's ``closed`` and ``exception()``; an aiohttp
    that renames one fails here by name, not as a watch that silently never fires."""
    import aiohttp

    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(HEADS["keep-alive"] % len(BODY))
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(BODY)
        await writer.drain()

    server = Server(handler)
    async with (
        server,
        aiohttp.ClientSession() as session,
        session.post(server.url() + "/x", data=b"{}") as resp,
    ):
        assert resp.connection is not None
        protocol = resp.connection.protocol
        assert isinstance(protocol.closed, asyncio.Future) and protocol.exception() is None
        fail_if_cut(resp)
        assert aiohttp_stream._READING.get(protocol) is resp.content
        assert await resp.read() == BODY
