"""A whole answer read up to a cap (``Upstream.call``'s ``max_bytes``): past it, a 502 naming
the provider and the cap, with the rest of the body never read and the answer closed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from proxy.config import ProviderConfig
from proxy.errors import UpstreamBadResponse
from proxy.transport import build_client
from proxy.upstream import Upstream


class _Endless(httpx.AsyncByteStream):
    """A body of 1 KiB pieces that never ends; counts what was read, and the close."""

    def __init__(self) -> None:
        self.read = 0
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            self.read += 1
            yield b"x" * 1024

    async def aclose(self) -> None:
        self.closed = True


async def test_a_body_over_the_cap_is_a_502_and_is_read_no_further() -> None:
    body = _Endless()
    upstream = Upstream(
        build_client(transport=httpx.MockTransport(lambda _: httpx.Response(200, stream=body))),
        env={},
    )
    provider = ProviderConfig(base_url="http://llm.test/v1")
    with pytest.raises(UpstreamBadResponse, match="cap of 4096 bytes"):
        await upstream.call(
            provider, "POST", "/chat/completions", client_headers={}, content=b"{}", max_bytes=4096
        )
    await upstream.client.aclose()
    assert body.read == 5 and body.closed


async def test_a_body_within_the_cap_is_read_whole() -> None:
    upstream = Upstream(
        build_client(transport=httpx.MockTransport(lambda _: httpx.Response(200, content=b"{}"))),
        env={},
    )
    provider = ProviderConfig(base_url="http://llm.test/v1")
    answer = await upstream.call(
        provider, "POST", "/chat/completions", client_headers={}, content=b"{}", max_bytes=2
    )
    await upstream.client.aclose()
    assert answer.content == b"{}"
