"""A provider's cookies are not kept: the client is shared by every tenant, so a cookie one
request was given would otherwise go out with everyone's later requests to that provider."""

from __future__ import annotations

import pytest

from proxy.config import ProviderConfig
from proxy.transport import Kind, build_client
from proxy.upstream import Upstream
from tests.fakes.scripted import Reader, Server, Writer


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
async def test_a_cookie_a_provider_sets_is_not_sent_back(kind: Kind) -> None:
    async def handler(reader: Reader, writer: Writer, n: int) -> None:
        while await server.request(reader) is not None:
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"set-cookie: __cf_bm=tenant-a; Path=/; HttpOnly\r\n"
                b"content-length: 2\r\n\r\n{}"
            )
            await writer.drain()

    upstream = Upstream(build_client(kind=kind), env={})
    async with Server(handler) as server:
        provider = ProviderConfig(base_url=server.url())
        for _ in range(2):
            answer = await upstream.call(provider, "GET", "/models", client_headers={})
            assert answer.status_code == 200
    await upstream.client.aclose()
    assert len(server.requests) == 2
    assert b"cookie" not in server.requests[1].lower().replace(b"set-cookie", b"")
