"""A provider's stream that breaks off: every byte that arrived before the break is handed
over before the error (the relay shows the client the partial answer, then an error frame)."""

from __future__ import annotations

import asyncio

import pytest

from proxy.config import ProviderConfig
from proxy.transport import Kind, build_client
from proxy.upstream import Upstream
from tests.fakes.scripted import Reader, Server, Writer

SHORT = b"data: one\n\ndata: two\n\n"
LONG = b"".join(b"data: %d %s\n\n" % (i, b"x" * 990) for i in range(200))  # ~200 KB at once


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
@pytest.mark.parametrize("frames", [SHORT, LONG], ids=["short", "long"])
async def test_bytes_before_a_break_come_before_the_error(kind: Kind, frames: bytes) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        await server.request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"content-length: %d\r\n\r\n" % (len(frames) + 1000) + frames
        )  # 1000 more promised than sent
        await writer.drain()
        writer.close()  # the body ends short of its length

    upstream = Upstream(build_client(kind=kind), env={})
    got = b""
    async with Server(handler) as server:
        answer = await upstream.open_stream(
            ProviderConfig(base_url=server.url()),
            "/chat/completions",
            client_headers={},
            content=b"{}",
        )
        await asyncio.sleep(0.2)  # the break arrives before anyone reads (a busy client)
        with pytest.raises(Exception) as info:  # noqa: PT011 - each transport names it its way
            async for chunk in answer.aiter_bytes():
                got += chunk
        await answer.aclose()
    await upstream.client.aclose()
    assert got == frames, info.value
