"""A client that reads a stream slowly slows the provider down; the proxy does not buffer it."""

from __future__ import annotations

import asyncio

from proxy.h1client import H1Client
from proxy.services.relay import RoundOutcome, relay_round
from proxy.upstream import StreamAnswer
from tests.unit.test_h1client import Server

FRAME = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 1000 + b'"}}]}\n\n'


async def test_a_slow_client_pauses_the_provider() -> None:
    total = 8000  # frames, about 8 MB

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      n: int) -> None:
        await server.request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"content-length: %d\r\n\r\n" % (len(FRAME) * total + 14))
        for _ in range(total // 100):
            writer.write(FRAME * 100)
            await writer.drain()
        writer.write(b"data: [DONE]\n\n")
        await writer.drain()

    client = H1Client()
    async with Server(handler) as server:
        raw = await client.request("POST", server.url(), "/chat/completions", headers={},
                                   body=b"{}", connect_timeout=5, read_timeout=5)
        answer = StreamAnswer(raw)
        pieces = relay_round(answer, RoundOutcome(), strip_usage=False, intercept=False,
                             keepalive=10)
        await pieces.__anext__()
        await asyncio.sleep(0.5)  # the client is busy; the provider keeps sending
        conn = raw._conn
        assert conn.paused and conn.buffered < 3 << 20  # held back, not read into memory
        got = 1
        async for _ in pieces:
            got += 1
        assert got == total + 1  # every frame, then [DONE]
        await answer.aclose()
    await client.aclose()
