"""The shared client to providers: request building, credentials, error mapping.

Relaying is byte for byte: the caller gets the answer (whole, or a ``StreamAnswer`` to read
as it arrives) and forwards its bytes. Only transport failures are translated, into 502
(unreachable) and 504 (timed out), and redirects, into 502 (``_send``); a provider's own
4xx and 5xx answers pass through untouched.

One ``aiohttp.ClientSession`` serves both. bench/overhead measured the client choices side
by side (CPU per request of a bare relay): on the tiny request at concurrency 32, httpx
2.5 ms, httpx over the httpx-aiohttp transport 0.56 ms, aiohttp 0.30 ms; on the 50-chunk
stream, httpx 5.9 ms and aiohttp 2.5 ms. In Cascade's own profile httpx's layers were a
quarter of the CPU of a whole answer and a third of a stream's (httpcore's per-read
timeouts and h11's parser).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from proxy.config import ProviderConfig
from proxy.errors import UpstreamTimeout, UpstreamUnavailable
from proxy.jsonio import loads

__all__ = ["Upstream", "Answer", "StreamAnswer", "RELAY_RESPONSE_HEADERS", "response_headers"]

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


class StreamAnswer:
    """A provider's answer whose body is read as it arrives; ``aclose`` it when done."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status_code = resp.status
        self.headers: Mapping[str, str] = resp.headers

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """Each piece as soon as it is received; a broken connection raises only after every
        byte that arrived before the break was yielded.

        aiohttp's reader raises the moment the connection is lost, before returning what it
        had already buffered; the frames a provider sent just before breaking off would be
        lost. So on an error the buffer is drained first. ``_buffer`` is aiohttp's own, so
        test_chat_stream.py's mid-stream reset test guards this (it fails without it).
        """
        reader = self._resp.content
        try:
            async for chunk in reader.iter_any():
                yield chunk
        except Exception:
            left = b"".join(getattr(reader, "_buffer", ()))
            if left:
                yield left
            raise

    async def aread(self) -> bytes:
        with _mapped_errors(str(self._resp.url)):  # a body that breaks off is a 502
            return await self._resp.read()

    async def aclose(self) -> None:
        self._resp.close()  # closes the connection unless the body was read to its end


def response_headers(resp: Answer | StreamAnswer) -> dict[str, str]:
    """Upstream headers worth relaying: content type, Retry-After, request ids, rate limits.

    Values go out as the provider's bytes: aiohttp decodes them as UTF-8 (surrogateescape)
    and Starlette encodes latin-1, so a value such as ``x-request-id: €`` made building the
    response fail; the round trip below gives Starlette one character per original byte.
    """
    out = {}
    for key, value in resp.headers.items():
        low = key.lower()
        if low in RELAY_RESPONSE_HEADERS or low.startswith(_RELAY_PREFIXES):
            out[key] = value if value.isascii() else (
                value.encode("utf-8", "surrogateescape").decode("latin-1"))
    return out


class Upstream:
    """``call`` for whole answers, ``open_stream`` for streams, over one aiohttp session."""

    def __init__(
        self, session: aiohttp.ClientSession, env: Mapping[str, str] | None = None
    ) -> None:
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

    async def _send(
        self, provider: ProviderConfig, method: str, path: str, *,
        client_headers: Mapping[str, str], content: bytes | None, params: Any,
    ) -> aiohttp.ClientResponse:
        """Send and wait for the status line and headers; a redirect is a 502 naming where
        it points, for every caller (chat, streams, the summariser, the passthroughs).

        ``timeoutSeconds`` bounds each wait for bytes (as a read timeout), not the whole
        answer, so a long completion or stream that keeps sending is never cut.
        """
        url = provider.base_url.rstrip("/") + path
        headers = self._headers(provider, client_headers)
        if content is None:
            headers.pop("content-type")
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=provider.connect_timeout_seconds,
            sock_read=provider.timeout_seconds,
        )
        with _mapped_errors(url):
            resp = await self.session.request(
                method, url, data=content, headers=headers, params=params, timeout=timeout,
                allow_redirects=False,
            )
        if 300 <= resp.status < 400:  # never relayed: a client would follow it past the proxy
            resp.release()
            raise UpstreamUnavailable(
                f"the provider answered {resp.status}, a redirect to "
                f"{resp.headers.get('location') or 'an unnamed address'}; set the provider's "
                "baseUrl to the address it points to"
            )
        return resp

    async def call(
        self, provider: ProviderConfig, method: str, path: str, *,
        client_headers: Mapping[str, str], content: bytes | None = None, params: Any = None,
    ) -> Answer:
        """One whole answer; transport failures become 502/504."""
        resp = await self._send(provider, method, path, client_headers=client_headers,
                                content=content, params=params)
        try:
            with _mapped_errors(str(resp.url)):
                body = await resp.read()
        finally:
            resp.release()
        return Answer(resp.status, resp.headers, body)

    async def open_stream(
        self, provider: ProviderConfig, path: str, *, client_headers: Mapping[str, str],
        content: bytes,
    ) -> StreamAnswer:
        """POST and return once the headers are in; the body is the caller's to read."""
        resp = await self._send(provider, "POST", path, client_headers=client_headers,
                                content=content, params=None)
        return StreamAnswer(resp)


@contextlib.contextmanager
def _mapped_errors(url: str) -> Iterator[None]:
    """Turn aiohttp's transport failures into 504 (timed out) or 502 (unreachable)."""
    u = urlsplit(url)  # host and port only: a baseUrl's user:password stays out of messages
    try:
        yield
    except TimeoutError as exc:  # aiohttp.ServerTimeoutError is one too
        raise UpstreamTimeout(
            f"the provider at {u.hostname} did not answer in time ({type(exc).__name__});"
            " retry, or raise the provider's timeoutSeconds in config"
        ) from exc
    except (aiohttp.ClientError, OSError) as exc:
        where = f"{u.scheme}://{u.hostname}" + (f":{u.port}" if u.port else "")
        raise UpstreamUnavailable(
            f"could not reach the provider at {where} ({type(exc).__name__}); check the"
            " provider's baseUrl and that it is running"
        ) from exc
