"""The shared client to providers: request building, credentials, error mapping.

Relaying is byte for byte: the caller gets the answer (whole, or a ``StreamAnswer`` to read
as it arrives) and forwards its bytes. Only transport failures are translated, into 502
(unreachable) and 504 (timed out), and redirects, into 502 (``_send``); a provider's own
4xx and 5xx answers pass through untouched.

One ``proxy.h1client.H1Client`` serves both. bench/overhead measured the client choices side
by side (CPU per request of a bare relay): on the tiny request at concurrency 32, httpx
2.5 ms, httpx over the httpx-aiohttp transport 0.56 ms, aiohttp 0.30 ms; on the 50-chunk
stream, httpx 5.9 ms and aiohttp 2.5 ms. aiohttp served here until its request path was the
largest single piece of Cascade's CPU; ``proxy.h1client`` says what replaced it and why.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from proxy.config import ProviderConfig
from proxy.errors import UpstreamTimeout, UpstreamUnavailable
from proxy.h1client import H1Client, H1Response
from proxy.jsonio import loads
from proxy.requestlog import UpstreamTimer

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

    def __init__(self, resp: H1Response, timer: UpstreamTimer | None = None) -> None:
        self._resp = resp
        self._timer = timer
        self.status_code = resp.status
        self.headers: Mapping[str, str] = resp.headers

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        """Each piece as soon as it is received; a broken connection raises only after every
        byte that arrived before the break was yielded (test_chat_stream.py's mid-stream
        reset test guards this)."""
        async for chunk in self._resp.iter_chunks():
            yield chunk

    async def aread(self) -> bytes:
        with _mapped_errors(self._resp.url):  # a body that breaks off is a 502
            return await self._resp.read()

    async def aclose(self) -> None:
        self._resp.release()  # closes the connection unless the body was read to its end
        if self._timer is not None:  # the request's upstream time ends with the stream
            self._timer.stop()


def response_headers(resp: Answer | StreamAnswer) -> dict[str, str]:
    """Upstream headers worth relaying: content type, Retry-After, request ids, rate limits.

    Names come lowercased, values as the provider's bytes (``proxy.h1client`` decodes them
    one character per byte and Starlette encodes them back the same way), so a value such
    as ``x-request-id: €`` goes out as sent.
    """
    return {
        key: value for key, value in resp.headers.items()
        if key in RELAY_RESPONSE_HEADERS or key.startswith(_RELAY_PREFIXES)
    }


class Upstream:
    """``call`` for whole answers, ``open_stream`` for streams, over one pooled client."""

    def __init__(
        self, client: H1Client | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        self.client = client if client is not None else H1Client()
        self._env = env if env is not None else os.environ

    def _headers(
        self, provider: ProviderConfig, client_headers: Mapping[str, str]
    ) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        key = self._env.get(provider.api_key_env) if provider.api_key_env else None
        key = key.strip() if key else key  # a secret written with a trailing newline
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
    ) -> H1Response:
        """Send and wait for the status line and headers; a redirect is a 502 naming where
        it points, for every caller (chat, streams, the summariser, the passthroughs).

        ``timeoutSeconds`` bounds each wait for bytes (as a read timeout), not the whole
        answer, so a long completion or stream that keeps sending is never cut.
        """
        headers = self._headers(provider, client_headers)
        if content is None:
            headers.pop("content-type")
        with _mapped_errors(provider.base_url):
            resp = await self.client.request(
                method, provider.base_url, path, headers=headers, body=content, params=params,
                connect_timeout=provider.connect_timeout_seconds,
                read_timeout=provider.timeout_seconds,
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
        timer = UpstreamTimer()  # the request's upstream time: send to the answer's last byte
        try:
            resp = await self._send(provider, method, path, client_headers=client_headers,
                                    content=content, params=params)
            try:
                with _mapped_errors(resp.url):
                    body = await resp.read()
            finally:
                resp.release()
        finally:
            timer.stop()
        return Answer(resp.status, resp.headers, body)

    async def open_stream(
        self, provider: ProviderConfig, path: str, *, client_headers: Mapping[str, str],
        content: bytes,
    ) -> StreamAnswer:
        """POST and return once the headers are in; the body is the caller's to read."""
        timer = UpstreamTimer()  # stopped by StreamAnswer.aclose, when the stream is done
        try:
            resp = await self._send(provider, "POST", path, client_headers=client_headers,
                                    content=content, params=None)
        except BaseException:
            timer.stop()
            raise
        return StreamAnswer(resp, timer)


@contextlib.contextmanager
def _mapped_errors(url: str) -> Iterator[None]:
    """Turn transport failures into 504 (timed out) or 502 (unreachable)."""
    try:
        yield
    except TimeoutError as exc:
        raise UpstreamTimeout(
            f"the provider at {_where(url, scheme=False)} did not answer in time"
            f" ({type(exc).__name__}); retry, or raise the provider's timeoutSeconds in config"
        ) from exc
    except OSError as exc:  # refused, reset, DNS, TLS, h1client.ProviderConnectionError
        where = _where(url, scheme=True)
        raise UpstreamUnavailable(
            f"could not reach the provider at {where} ({type(exc).__name__}); check the"
            " provider's baseUrl and that it is running"
        ) from exc


def _where(url: str, *, scheme: bool) -> str:
    """The provider's host (and scheme and port) for a message; never its user:password,
    and never an error of its own for a URL that does not parse (a bad port, a bracket)."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError:
        return "the configured baseUrl (it does not parse)"
    if not scheme:
        return str(u.hostname)
    return f"{u.scheme}://{u.hostname}" + (f":{port}" if port else "")
