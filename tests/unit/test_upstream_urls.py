"""proxy.upstream parses a provider URL once for the proxy's own calls, not per request."""

from __future__ import annotations

import httpx

from proxy.config import ProviderConfig
from proxy.transport import build_client
from proxy.upstream import Upstream


async def test_own_calls_reuse_the_parsed_url_and_passthroughs_are_not_kept() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={})

    upstream = Upstream(build_client(transport=httpx.MockTransport(handler)), env={})
    provider = ProviderConfig(base_url="http://user:pw@llm.test:8080/v1/")
    for _ in range(2):
        await upstream.call(provider, "POST", "/chat/completions", client_headers={}, content=b"{}")
    await upstream.call(provider, "GET", "/files/a b", client_headers={}, params=[("purpose", "x")])
    await upstream.client.aclose()
    assert seen == [
        "http://llm.test:8080/v1/chat/completions",
        "http://llm.test:8080/v1/chat/completions",
        "http://llm.test:8080/v1/files/a%20b?purpose=x",
    ]
    # one parse kept for the chat path; a client's passthrough path is not kept
    assert list(upstream._urls) == [(provider.base_url, "/chat/completions")]
