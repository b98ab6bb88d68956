"""A client that reads a stream slowly slows the provider down; the proxy does not buffer it."""

from __future__ import annotations

import asyncio
import socket

import pytest

from proxy.config import ProviderConfig
from proxy.services.relay import RoundOutcome, relay_round
from proxy.transport import Kind, build_client
from proxy.upstream import Upstream
from tests.fakes.scripted import Reader, Server, Writer

FRAME = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 1000 + b'"}}]}\n\n'
TOTAL = 16_000  # frames, about 17 MB: more than the socket buffers hold while stalled


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
async def test_a_slow_client_pauses_the_provider(kind: Kind) -> None:
    sent = 0

    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        nonlocal sent
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
        await server.request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"content-length: %d\r\n\r\n" % (len(FRAME) * TOTAL + 14)
        )
        for _ in range(TOTAL // 100):
            writer.write(FRAME * 100)
            await writer.drain()  # waits while the proxy does not read
            sent += len(FRAME) * 100
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()

    upstream = Upstream(build_client(kind=kind), env={})
    async with Server(handler) as server:
        answer = await upstream.open_stream(
            ProviderConfig(base_url=server.url()),
            "/chat/completions",
            client_headers={},
            content=b"{}",
        )
        pieces = relay_round(
            answer, RoundOutcome(), strip_usage=False, intercept=False, keepalive=10
        )
        got = (await pieces.__anext__()).count(b"data: ")
        await asyncio.sleep(0.8)  # the client is busy; the provider would keep sending
        assert sent < len(FRAME) * TOTAL // 3  # it waits on the proxy, which holds little
        async for piece in pieces:  # each piece is what one read completed
            got += piece.count(b"data: ")
        assert got == TOTAL + 1  # every frame, then [DONE]
        await answer.aclose()
    await upstream.client.aclose()
