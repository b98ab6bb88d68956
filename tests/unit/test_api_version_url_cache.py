"""A provider's ``apiVersion`` rides in the request's query, never in the parsed URL the
proxy keeps for its own calls (``Upstream._url``): those are kept for such a provider too
(they were not, its every call parsing its URL again), and two providers at one baseUrl with
different versions each send their own."""

from __future__ import annotations

from proxy.config import ProviderConfig
from proxy.transport import build_client
from proxy.upstream import Upstream

_BASE = "https://r.openai.azure.com/openai/deployments/d"


async def test_an_api_version_providers_own_calls_keep_their_parsed_url() -> None:
    upstream = Upstream(build_client(kind="httpx"), env={})
    old = ProviderConfig(base_url=_BASE, api_version="2024-10-21", name="old")
    new = ProviderConfig(base_url=_BASE, api_version="2025-01-01-preview", name="new")
    try:
        first = upstream._request(
            old, "POST", "/chat/completions", client_headers={}, content=b"{}", params=None
        )
        assert (_BASE, "/chat/completions") in upstream._urls
        second = upstream._request(
            new, "POST", "/chat/completions", client_headers={}, content=b"{}", params=None
        )
        client = upstream._request(
            new, "GET", "/models/x", client_headers={}, content=None, params=[("api-version", "1")]
        )
    finally:
        await upstream.client.aclose()
    assert str(first.url) == f"{_BASE}/chat/completions?api-version=2024-10-21"
    assert str(second.url) == f"{_BASE}/chat/completions?api-version=2025-01-01-preview"
    assert str(client.url) == f"{_BASE}/models/x?api-version=2025-01-01-preview"
    assert (_BASE, "/models/x") not in upstream._urls  # a client's path: never kept
