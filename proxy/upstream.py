"""The shared clients to providers: request building, credentials, error mapping.

Relaying is byte for byte: the caller gets the answer (whole, or an ``httpx.Response`` to
stream) and forwards its bytes. Only transport failures are translated, into 502
(unreachable) and 504 (timed out); a provider's own non-2xx answers pass through untouched.

Whole answers go through a plain ``aiohttp.ClientSession``. bench/overhead measured the
client choices side by side on the tiny request at concurrency 32 (CPU per request of a bare
relay): httpx 2.5 ms, httpx over the httpx-aiohttp transport 0.56 ms, aiohttp 0.30 ms; and
in Cascade's own profile the httpx layers over aiohttp (request building, URL parsing,
cookie extraction) were a quarter of the proxy's CPU. Streams stay on httpx's own transport
(see ``Upstream``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx

from proxy.config import ProviderConfig
from proxy.errors import UpstreamTimeout, UpstreamUnavailable
from proxy.jsonio import loads

__all__ = ["Upstream", "Answer", "RELAY_RESPONSE_HEADERS", "response_headers"]

# Request headers a client may send that providers care about; everything else is dropped
# (hop-by-hop headers, the client's Host, and our own X-Session-Id).
_FORWARD_REQUEST_HEADERS = ("openai-organization", "openai-project", "openai-beta", "user-agent")
RELAY_RESPONSE_HEADERS = ("content-type", "retry-after", "x-request-id", "openai-processing-ms")
_RELAY_PREFIXES = ("x-ratelimit-", "openai-")


@dataclass(frozen=True, slots=True)
class Answer:
    """A provider's whole (non-streamed) answer: status, headers and body bytes as sent."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    def json(self) -> Any:
        return loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def response_headers(resp: httpx.Response | Answer) -> dict[str, str]:
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
    """``call`` for whole answers (aiohttp), ``build`` + ``send`` for streams (httpx).

    Streams stay on httpx's own transport: aiohttp's reader raises on a dropped connection
    before handing over bytes it already buffered, so the frames a provider sent just before
    breaking off would be lost. Without a ``session`` (a test injected an httpx transport)
    whole answers go through ``client`` too.
    """

    def __init__(
        self, client: httpx.AsyncClient, env: Mapping[str, str] | None = None, *,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.client = client
        self.session = session
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

    async def call(
        self, provider: ProviderConfig, method: str, path: str, *,
        client_headers: Mapping[str, str], content: bytes | None = None, params: Any = None,
    ) -> Answer:
        """One whole answer; transport failures become 502/504 as in ``send``.

        ``timeoutSeconds`` bounds each wait for bytes (as httpx's read timeout does), not
        the whole answer, so a long completion that keeps its connection alive is not cut.
        """
        if self.session is None:
            req = self.build(provider, method, path, client_headers=client_headers,
                             content=content, params=params)
            resp = await self.send(req, stream=False)
            return Answer(resp.status_code, resp.headers, resp.content)
        url = provider.base_url.rstrip("/") + path
        headers = self._headers(provider, client_headers)
        if content is None:
            headers.pop("content-type")
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=provider.connect_timeout_seconds,
            sock_read=provider.timeout_seconds,
        )
        try:
            async with self.session.request(
                method, url, data=content, headers=headers, params=params, timeout=timeout,
                allow_redirects=False,
            ) as resp:
                return Answer(resp.status, resp.headers, await resp.read())
        except TimeoutError as exc:  # aiohttp.ServerTimeoutError is one too
            raise _timed_out_error(url, exc) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise _unreachable(url, exc) from exc

    async def send(self, request: httpx.Request, *, stream: bool) -> httpx.Response:
        """Send; map transport failures to 502/504 with a message naming the provider URL."""
        try:
            return await self.client.send(request, stream=stream)
        except httpx.TimeoutException as exc:
            if not _timed_out(exc.__cause__):
                # httpx-aiohttp reports any aiohttp connection error (refused, reset) as a
                # ConnectTimeout; what it wraps says whether time really ran out.
                raise _unreachable(str(request.url), exc.__cause__) from exc
            raise _timed_out_error(str(request.url), exc) from exc
        except httpx.TransportError as exc:
            raise _unreachable(str(request.url), exc) from exc


def _unreachable(url: str, exc: BaseException | None) -> UpstreamUnavailable:
    u = urlsplit(url)  # host and port only: a baseUrl's user:password never reaches a message
    return UpstreamUnavailable(
        f"could not reach the provider at {u.scheme}://{u.hostname}:{u.port or ''}"
        f" ({type(exc).__name__}); check the provider's baseUrl and that it is running"
    )


def _timed_out_error(url: str, exc: BaseException) -> UpstreamTimeout:
    return UpstreamTimeout(
        f"the provider at {urlsplit(url).hostname} did not answer in time"
        f" ({type(exc).__name__}); retry, or raise the provider's timeoutSeconds in config"
    )
