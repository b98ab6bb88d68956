"""The shared client to providers: request building, credentials, error mapping.

Relaying is byte for byte: the caller gets the answer (whole, or a ``StreamAnswer`` to read
as it arrives; both in ``answers.py``) and forwards its bytes. Only transport failures are
translated, into 502 (unreachable) and 504 (timed out), and redirects, into 502 (``_send``); a
provider's own 4xx and 5xx answers pass through with their status and headers, their body
with the credential the call sent replaced by ``[REDACTED]`` (``proxy.credentials``: some
providers quote the key they were sent), and each answer keeps that credential to scrub
any other provider error the proxy quotes (``Answer.scrub``, ``StreamAnswer.scrub``);
``proxy.provider_errors`` words the 502s and 504s.

Requests go through the one ``httpx.AsyncClient`` the lifespan owns (``proxy.transport``).
``timeoutSeconds`` is httpx's read (and write) timeout, so it bounds each wait for bytes and
never the whole answer; ``connectTimeoutSeconds`` is its connect timeout. A provider that
compresses its answer (``DECODED_ENCODINGS``) is decoded here, by httpx, over either
transport, and the relayed headers never carry ``content-encoding`` or ``content-length``
(``response_headers`` names what is relayed); any other encoding is a 502 naming it. A whole
answer is read up to ``max_bytes`` when the caller sets one (a chat completion's and a model
list's ``MAX_ANSWER_BYTES``, an embeddings answer's ``MAX_EMBEDDINGS_BYTES``), past which it
is a 502 too and its connection closed; every whole answer takes its bytes from the app's
budget as well (``proxy.answer_budget``: a 503 ``server_busy`` when it is spent).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from proxy.answer_budget import AnswerBudget, Lease
from proxy.answers import (
    ASK_FOR_LESS,
    RELAY_RESPONSE_HEADERS,
    Answer,
    StreamAnswer,
    read_capped,
    response_headers,
    scrubbed,
)
from proxy.config import ProviderConfig
from proxy.credentials import CLIENT_KEY_HEADERS, scrub_text, sent_secrets
from proxy.errors import ProxyError, UpstreamBadResponse
from proxy.logs import without_credentials
from proxy.provider_errors import POOL_WAIT_SECONDS, mapped_errors, provider_name
from proxy.requestlog import UpstreamTimer
from proxy.transport import STREAM_EXTENSION, TLS_EXTENSION, TlsSettings, build_client

__all__ = [
    "Upstream",
    "basic_auth",
    "Answer",
    "StreamAnswer",
    "DECODED_ENCODINGS",
    "OWN_KEY_HEADERS",
    "RELAY_RESPONSE_HEADERS",
    "response_headers",
]

# Request headers a client may send that providers care about; everything else is dropped
# (hop-by-hop headers, the client's Host, and our own X-Session-Id).
_FORWARD_REQUEST_HEADERS = ("openai-beta", "user-agent")
_CLIENT_KEY_HEADERS = ("authorization", *CLIENT_KEY_HEADERS)
"""Where a client's key comes (``Authorization``, Azure's ``api-key``, ``x-api-key``),
forwarded as it came when the provider has no key of the proxy's (``apiKeyEnv``)."""
OWN_KEY_HEADERS = ("openai-organization", "openai-project")
"""Headers that pick among the organisations and projects of the credential they ride with:
forwarded only beside the client's own key, never with the proxy's key (or a
``baseUrl``'s user and password), among whose organisations a client has no say."""
DECODED_ENCODINGS = frozenset({"identity", "gzip", "deflate", "br", "zstd"})
"""The content codings httpx decodes: gzip and deflate with zlib, ``br`` and ``zstd`` with the
decoders its extras install (pyproject). httpx passes any other coding through undecoded and
keeps its own list private, so this one is the project's; tests/unit/test_content_encodings.py
checks that the two agree."""
_DECODED_NAMES = ", ".join(sorted(DECODED_ENCODINGS))
_PORTS = {"http": 80, "https": 443}  # a URL's port when it names none


@dataclass(frozen=True, slots=True)
class _Target:
    """A provider's base URL without its ``user:password``, and those as a Basic header."""

    base: str
    auth: str | None


def _target(base_url: str) -> _Target:
    """Raises ``httpx.InvalidURL`` for a base URL that is not a usable http(s) URL (httpx
    itself takes a port past 65535 and fails later, deep in the socket call)."""
    try:
        u = urlsplit(base_url)
        u.port  # noqa: B018 - raises ValueError when out of range or not a number
    except ValueError:
        raise httpx.InvalidURL("the baseUrl does not parse") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise httpx.InvalidURL("the baseUrl is not an http(s) URL")
    try:
        u.hostname.encode("idna")  # an empty label ("a..b"): no resolver takes it
    except UnicodeError:
        raise httpx.InvalidURL("the baseUrl's host is not a valid name") from None
    if u.username is None and u.password is None:
        return _Target(base_url.rstrip("/"), None)
    host = u.netloc.rpartition("@")[2]
    clean = urlunsplit((u.scheme, host, u.path, u.query, u.fragment)).rstrip("/")
    basic = httpx.BasicAuth(unquote(u.username or ""), unquote(u.password or ""))
    request = next(basic.auth_flow(httpx.Request("GET", "http://x/")))
    return _Target(clean, request.headers["authorization"])


def basic_auth(base_url: str) -> str | None:
    """The Basic header a call to ``base_url`` carries for its ``user:password`` when the
    client sent no ``Authorization`` of its own (None without them): what a refusal names
    as that URL's credential (``provider_refusal``). Raises as ``_target`` does."""
    return _target(base_url).auth


def _redirect_target(resp: httpx.Response) -> str:
    """Where a redirect points, without the credential the call sent (scrubbed as an error
    body is: a provider may redirect to a URL holding the key), a user:password, or a query
    or fragment at all (``?…``), which may hold a token that is not the call's: the 502's
    message is logged, and stored in a summariser's event, as well as sent."""
    location = resp.headers.get("location")
    if not location:
        return "an unnamed address"
    said = without_credentials(scrub_text(location, sent_secrets(resp.request)))
    cut = min((at for at in (said.find("?"), said.find("#")) if at >= 0), default=-1)
    return said if cut < 0 else f"{said[: cut + 1]}…"


def _decodable(encoding: str) -> bool:
    """Whether httpx decodes every coding in a ``content-encoding`` value."""
    codings = (c.strip().lower() for c in encoding.split(","))
    return all(c in DECODED_ENCODINGS for c in codings if c)


API_VERSION = "api-version"
"""The query parameter a provider's ``apiVersion`` is sent in (Azure's)."""


class Upstream:
    """``call`` for whole answers, ``open_stream`` for streams, over one pooled client."""

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        env: Mapping[str, str] | None = None,
        proxy_for: Callable[[httpx.URL], str | None] | None = None,
        budget: AnswerBudget | None = None,
    ) -> None:
        """``proxy_for`` is the transport's choice of egress proxy for a URL
        (``ProviderTransport.proxy_for``), so that a 502 says which proxy failed; ``budget``
        the bytes whole answers may hold at once (none: no budget)."""
        self.budget = budget if budget is not None else AnswerBudget()
        self.client = client if client is not None else build_client()
        self._env = env if env is not None else os.environ
        self._proxy_for = proxy_for
        self._targets: dict[str, _Target] = {}
        self._urls: dict[tuple[str, str], httpx.URL] = {}
        self._timeouts: dict[tuple[float, float], httpx.Timeout] = {}

    def _headers(
        self, provider: ProviderConfig, client_headers: Mapping[str, str]
    ) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if key := provider.own_key(self._env):
            if not (key.isascii() and key.isprintable()):
                # refused here: the transport's own error would quote the header, key and all
                raise ProxyError(
                    f"{provider_name(provider)}'s key in ${provider.api_key_env} holds a "
                    "character no HTTP header can carry (a line break, a control or non-ASCII "
                    "character); correct the variable and restart the proxy"
                )
            headers["authorization"] = f"Bearer {key}"
        else:  # the client's own key, in the header it came in (``credentials``)
            keys = {n: v for n in _CLIENT_KEY_HEADERS if (v := client_headers.get(n))}
            headers.update(keys)
            if keys:  # the organisation and project are the client's key's
                for name in OWN_KEY_HEADERS:
                    if value := client_headers.get(name):
                        headers[name] = value
        for name in _FORWARD_REQUEST_HEADERS:
            if value := client_headers.get(name):
                headers[name] = value
        return headers

    def _proxy_of(self, base_url: str) -> str | None:
        assert self._proxy_for is not None
        return self._proxy_for(httpx.URL(base_url))

    def _url(self, base_url: str, target: _Target, path: str, *, cache: bool) -> httpx.URL:
        """The parsed URL of ``path`` at a provider, kept for the proxy's own calls (their
        paths are constants; a passthrough's path is the client's): httpx parses a string
        URL on every request, which costs more than building the rest of the request."""
        url = self._urls.get((base_url, path))
        if url is None:
            url = httpx.URL(target.base + path)
            if cache and len(self._urls) < 1024:  # base URLs change only with the config
                self._urls[(base_url, path)] = url
        return url

    def _request(
        self,
        provider: ProviderConfig,
        method: str,
        path: str,
        *,
        client_headers: Mapping[str, str],
        content: bytes | None,
        params: Any,
        stream: bool = False,
        timer: UpstreamTimer | None = None,
    ) -> httpx.Request:
        target = self._targets.get(provider.base_url)
        if target is None:
            target = _target(provider.base_url)
            if len(self._targets) < 1024:  # base URLs change only with the config
                self._targets[provider.base_url] = target
        headers = self._headers(provider, client_headers)
        if content is None:
            headers.pop("content-type")
        if target.auth is not None and "authorization" not in headers:
            headers["authorization"] = target.auth
        own = params is None  # the proxy's own call, whose path is a constant: its URL kept
        if provider.api_version is not None:  # the provider's own, not a client's
            kept = [p for p in (params or ()) if p[0] != API_VERSION]
            params = [*kept, (API_VERSION, provider.api_version)]
        url = self._url(provider.base_url, target, path, cache=own)
        if timer is not None and timer.traced:  # the call's trace context; none untraced
            headers.update(timer.trace_headers(url.host, url.port or _PORTS.get(url.scheme)))
        limits = (provider.connect_timeout_seconds, provider.timeout_seconds)
        timeout = self._timeouts.get(limits)
        if timeout is None:
            timeout = self._timeouts[limits] = httpx.Timeout(
                provider.timeout_seconds,
                connect=provider.connect_timeout_seconds,
                pool=POOL_WAIT_SECONDS,
            )
        tls = TlsSettings(provider.ca_file, provider.verify_tls)
        return self.client.build_request(
            method,
            url,
            # a client's header as the bytes it sent, which the ASGI server decoded as
            # Latin-1: httpx encodes text as ASCII unless told otherwise, and raises on a
            # visible octet HTTP allows (a "café" in a User-Agent)
            headers=httpx.Headers(headers, encoding="latin-1"),
            content=content,
            params=params,
            timeout=timeout,
            extensions={TLS_EXTENSION: tls, STREAM_EXTENSION: stream},
        )

    async def _send(
        self,
        provider: ProviderConfig,
        method: str,
        path: str,
        *,
        client_headers: Mapping[str, str],
        content: bytes | None,
        params: Any,
        stream: bool = False,
        timer: UpstreamTimer | None = None,
    ) -> httpx.Response:
        """Send and wait for the status line and headers; a redirect is a 502 naming where
        it points, for every caller (chat, streams, the summariser, the passthroughs), and so
        is a status past 599, which no ASGI server sends (the client would lose its
        connection instead of reading an error)."""
        proxy_of = self._proxy_of if self._proxy_for is not None else None
        with mapped_errors(provider, proxy_of):
            request = self._request(
                provider,
                method,
                path,
                client_headers=client_headers,
                content=content,
                params=params,
                stream=stream,
                timer=timer,
            )
            resp = await self.client.send(request, stream=True)
        if 300 <= resp.status_code < 400:  # never relayed: a client would follow it
            await resp.aclose()
            raise UpstreamBadResponse(
                f"{provider_name(provider)} answered {resp.status_code}, a redirect to "
                f"{_redirect_target(resp)}; set the provider's baseUrl to the address it "
                "points to"
            )
        if resp.status_code > 599:
            await resp.aclose()
            raise UpstreamBadResponse(
                f"{provider_name(provider)} answered {resp.status_code}, which is no HTTP "
                "status (they end at 599)"
            )
        if (encoding := resp.headers.get("content-encoding")) and not _decodable(encoding):
            # httpx passes an encoding it has no decoder for through as it is, and the relay
            # drops the header: the client would get bytes it cannot read.
            await resp.aclose()
            raise UpstreamBadResponse(
                f"{provider_name(provider)} answered {resp.status_code} compressed as "
                f"{encoding[:40]!r}, which the proxy cannot decode (it asks for identity); "
                f"have the provider send one of {_DECODED_NAMES}"
            )
        return resp

    async def call(
        self,
        provider: ProviderConfig,
        method: str,
        path: str,
        *,
        client_headers: Mapping[str, str],
        content: bytes | None = None,
        params: Any = None,
        model: str | None = None,
        max_bytes: int | None = None,
        over_hint: str = ASK_FOR_LESS,
    ) -> Answer:
        """One whole answer; transport failures become 502/504, a body over ``max_bytes``
        (None: no cap) a 502 naming the cap and saying ``over_hint`` (``read_capped``).
        ``model`` names the call in its metrics and span only. A spent budget is the 503
        before anything is sent (``answer_budget``)."""
        self.budget.refuse_if_busy()
        with Lease(self.budget) as lease:  # given back if no answer comes of the bytes
            # The request's upstream time: send to the answer's last byte.
            timer = UpstreamTimer(provider.name, path, model, method)
            status = None
            cancelled = False
            failure: str | None = None  # the body broke off after the status came
            try:
                resp = await self._send(
                    provider,
                    method,
                    path,
                    client_headers=client_headers,
                    content=content,
                    params=params,
                    timer=timer,
                )
                status = resp.status_code
                try:
                    body = await read_capped(resp, provider, max_bytes, over_hint, lease)
                finally:
                    await resp.aclose()
            except asyncio.CancelledError:
                cancelled = True
                raise
            except Exception as exc:
                if status is not None or isinstance(exc, UpstreamBadResponse):  # it answered
                    failure = type(exc.__cause__ or exc).__name__
                raise
            finally:
                timer.stop(status, cancelled=cancelled, failure=failure)
            code = resp.status_code
            answer = Answer(code, resp.headers, scrubbed(code, body, resp.request), resp.request)
            lease.tie(answer)  # its bytes are the budget's until the answer is freed
        return answer

    async def open_stream(
        self,
        provider: ProviderConfig,
        path: str,
        *,
        client_headers: Mapping[str, str],
        content: bytes,
        model: str | None = None,
        params: Any = None,
    ) -> StreamAnswer:
        """POST and return once the headers are in; the body is the caller's to read."""
        # Stopped by StreamAnswer.aclose, when the stream is done.
        timer = UpstreamTimer(provider.name, path, model)
        try:
            resp = await self._send(
                provider,
                "POST",
                path,
                client_headers=client_headers,
                content=content,
                params=params,
                stream=True,
                timer=timer,
            )
        except BaseException as exc:
            answered = isinstance(exc, UpstreamBadResponse)  # with nothing usable: no network fault
            timer.stop(
                cancelled=isinstance(exc, asyncio.CancelledError),
                failure=type(exc.__cause__ or exc).__name__ if answered else None,
            )
            raise
        timer.first_byte()  # the wait for the provider, as the overhead counts it, ends here
        return StreamAnswer(resp, provider, timer, self.budget)
