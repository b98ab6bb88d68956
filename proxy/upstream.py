"""The one shared httpx client to providers: request building, credentials, error mapping.

Relaying is byte for byte: the caller gets the ``httpx.Response`` (streamed or read) and
forwards its bytes. Only transport failures are translated, into 502 (unreachable) and
504 (timed out); a provider's own non-2xx answers are passed through untouched.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx

from proxy.config import ProviderConfig
from proxy.errors import UpstreamTimeout, UpstreamUnavailable

__all__ = ["Upstream", "RELAY_RESPONSE_HEADERS", "response_headers"]

# Request headers a client may send that providers care about; everything else is dropped
# (hop-by-hop headers, the client's Host, and our own X-Session-Id).
_FORWARD_REQUEST_HEADERS = ("openai-organization", "openai-project", "openai-beta", "user-agent")
RELAY_RESPONSE_HEADERS = ("content-type", "retry-after", "x-request-id", "openai-processing-ms")
_RELAY_PREFIXES = ("x-ratelimit-", "openai-")


def response_headers(resp: httpx.Response) -> dict[str, str]:
    """Upstream headers worth relaying: content type, Retry-After, request ids, rate limits."""
    out = {}
    for key, value in resp.headers.items():
        low = key.lower()
        if low in RELAY_RESPONSE_HEADERS or low.startswith(_RELAY_PREFIXES):
            out[key] = value
    return out


class Upstream:
    def __init__(self, client: httpx.AsyncClient, env: Mapping[str, str] | None = None) -> None:
        self.client = client
        self._env = env if env is not None else os.environ

    def _headers(
        self, provider: ProviderConfig, client_headers: Mapping[str, str]
    ) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        key = self._env.get(provider.api_key_env) if provider.api_key_env else None
        if key:
            headers["authorization"] = f"Bearer {key}"
        elif auth := client_headers.get("authorization"):
            headers["authorization"] = auth
        for name in _FORWARD_REQUEST_HEADERS:
            if value := client_headers.get(name):
                headers[name] = value
        return headers

    def build(
        self, provider: ProviderConfig, method: str, path: str, *,
        client_headers: Mapping[str, str], content: bytes | None = None,
        params: Any = None,
    ) -> httpx.Request:
        timeout = httpx.Timeout(
            provider.timeout_seconds, connect=provider.connect_timeout_seconds
        )
        url = provider.base_url.rstrip("/") + path
        headers = self._headers(provider, client_headers)
        if content is None:
            headers.pop("content-type")
        return self.client.build_request(
            method, url, content=content, headers=headers, params=params, timeout=timeout
        )

    async def send(self, request: httpx.Request, *, stream: bool) -> httpx.Response:
        """Send; map transport failures to 502/504 with a message naming the provider URL."""
        try:
            return await self.client.send(request, stream=stream)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(
                f"the provider at {request.url.host} did not answer in time ({type(exc).__name__});"
                " retry, or raise the provider's timeoutSeconds in config"
            ) from exc
        except httpx.TransportError as exc:
            raise UpstreamUnavailable(
                f"could not reach the provider at {request.url.scheme}://{request.url.host}"
                f":{request.url.port or ''} ({type(exc).__name__}); check the provider's baseUrl"
                " and that it is running"
            ) from exc
