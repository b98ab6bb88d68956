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


def _timed_out(cause: BaseException | None) -> bool:
    """httpx's own timeouts wrap httpcore's ``*Timeout``; aiohttp's are ``TimeoutError``s."""
    return cause is None or isinstance(cause, TimeoutError) or "Timeout" in type(cause).__name__


class Upstream:
    """Two clients, one API: ``client`` for whole answers, ``stream_client`` for streams.

    They may share a transport (tests inject one). In production whole answers go through
    httpx-aiohttp (much faster under concurrency), streams through httpx's own transport:
    aiohttp's reader raises on a dropped connection before handing over bytes it already
    buffered, so the frames a provider sent just before breaking off would be lost.
    """

    def __init__(
        self, client: httpx.AsyncClient, env: Mapping[str, str] | None = None, *,
        stream_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.client = client
        self.stream_client = stream_client or client
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
            client = self.stream_client if stream else self.client
            return await client.send(request, stream=stream)
        except httpx.TimeoutException as exc:
            if not _timed_out(exc.__cause__):
                # httpx-aiohttp reports any aiohttp connection error (refused, reset) as a
                # ConnectTimeout; what it wraps says whether time really ran out.
                raise self._unreachable(request, exc.__cause__) from exc
            raise UpstreamTimeout(
                f"the provider at {request.url.host} did not answer in time ({type(exc).__name__});"
                " retry, or raise the provider's timeoutSeconds in config"
            ) from exc
        except httpx.TransportError as exc:
            raise self._unreachable(request, exc) from exc

    @staticmethod
    def _unreachable(request: httpx.Request, exc: BaseException) -> UpstreamUnavailable:
        return UpstreamUnavailable(
            f"could not reach the provider at {request.url.scheme}://{request.url.host}"
            f":{request.url.port or ''} ({type(exc).__name__}); check the provider's baseUrl"
            " and that it is running"
        )
