"""The process's one ``httpx.AsyncClient`` to providers, and the transport that routes it.

``build_client`` makes the client the lifespan owns. Its transport, ``ProviderTransport``,
keeps one ``httpx.AsyncHTTPTransport`` (one connection pool) per provider origin and TLS
setting, made on first use, so that:

- each provider gets its own cap on connections (``Limits``) and its own keep-alive pool;
- each provider's ``caFile`` / ``verifyTls`` applies to it alone (one ``SSLContext`` per
  setting, shared by every origin that uses it);
- a provider added by a config reload gets its pool without a new client.

A client given a transport ignores the proxy variables (httpx mounts them only on a client
built without one), so ``ProviderTransport`` applies them itself, with httpx's own reading of
``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` and its own pattern matching:
each origin goes through the proxy httpx would pick for it, or direct. ``SSL_CERT_FILE`` and
``SSL_CERT_DIR`` choose the trusted CAs as in httpx (``create_ssl_context``); a provider's
``caFile`` replaces them for that provider.

``kind`` picks what each pool is: ``httpx`` (httpx's own ``AsyncHTTPTransport``, the
default) or ``aiohttp`` (``httpx_aiohttp.AiohttpTransport``: the same httpx client and
responses over aiohttp's connection pool, which costs less CPU per request; the optional
``aiohttp`` extra installs it). Both get the same limits, proxy and ``SSLContext``;
``CASCADE_HTTP_TRANSPORT`` chooses. aiohttp is not the default because a stream that breaks
off while nobody reads it loses the bytes that arrived before the break (its reader raises
the error before handing over what it holds), so the client does not see the partial answer.

Tests hand ``build_client`` an ``httpx.MockTransport`` instead (``create_app(...,
http_transport=...)``); everything else about the client stays the same.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Literal

import httpx
from httpx._utils import URLPattern, get_environment_proxies

__all__ = [
    "ProviderTransport",
    "TlsSettings",
    "TLS_EXTENSION",
    "build_client",
    "KEEPALIVE_SECONDS",
    "Kind",
]

Kind = Literal["httpx", "aiohttp"]

TLS_EXTENSION = "cascade.tls"  # request extension naming the provider's TLS settings
# An idle connection is closed after this long: under the 5 s that uvicorn (and so vLLM) and
# Node keep one open, so the proxy never sends a request on a connection the provider is
# closing at that moment (a reset, answered 502, that tests/reliability's long soak met).
KEEPALIVE_SECONDS = 4.0


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """A provider's ``caFile`` and ``verifyTls``, as a request carries them to the transport."""

    ca_file: str | None = None
    verify: bool = True


_DEFAULT_TLS = TlsSettings()


class ProviderTransport(httpx.AsyncBaseTransport):
    """One pooled ``AsyncHTTPTransport`` per (origin, proxy, TLS settings); see the module."""

    def __init__(self, *, max_connections: int, kind: Kind = "httpx") -> None:
        if kind == "aiohttp":
            try:
                from httpx_aiohttp import AiohttpTransport  # optional: the aiohttp extra
            except ImportError as exc:
                raise RuntimeError(
                    "CASCADE_HTTP_TRANSPORT=aiohttp needs httpx-aiohttp: "
                    "pip install 'cascade-proxy[aiohttp]'"
                ) from exc
            self._make: type[httpx.AsyncBaseTransport] = AiohttpTransport
        else:
            self._make = httpx.AsyncHTTPTransport
        self._limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=KEEPALIVE_SECONDS,
        )
        patterns = {URLPattern(key): url for key, url in get_environment_proxies().items()}
        self._proxies = sorted(patterns.items())  # most specific first, as httpx orders them
        self._contexts: dict[TlsSettings, ssl.SSLContext] = {}
        self._pools: dict[tuple[object, ...], httpx.AsyncBaseTransport] = {}

    def proxy_for(self, url: httpx.URL) -> str | None:
        """The proxy httpx's environment rules pick for ``url``; None to go direct."""
        for pattern, proxy in self._proxies:
            if pattern.matches(url):
                return proxy
        return None

    def context_for(self, tls: TlsSettings) -> ssl.SSLContext:
        """The ``SSLContext`` for a provider's TLS settings (made once per setting).

        An unreadable ``caFile`` raises ``OSError`` or ``ssl.SSLError``; the caller maps it.
        """
        ctx = self._contexts.get(tls)
        if ctx is None:
            if not tls.verify:
                ctx = httpx.create_ssl_context(verify=False)
            elif tls.ca_file:
                ctx = ssl.create_default_context(cafile=tls.ca_file)
            else:
                ctx = httpx.create_ssl_context(trust_env=True)  # SSL_CERT_FILE / _DIR
            self._contexts[tls] = ctx
        return ctx

    def _pool(self, request: httpx.Request) -> httpx.AsyncBaseTransport:
        url = request.url
        tls = request.extensions.get(TLS_EXTENSION, _DEFAULT_TLS)
        if url.scheme != "https":
            tls = _DEFAULT_TLS  # plain http: no certificate to check
        proxy = self.proxy_for(url)
        key = (url.scheme, url.host, url.port, proxy, tls)
        pool = self._pools.get(key)
        if pool is None:
            pool = self._make(  # type: ignore[call-arg]
                verify=self.context_for(tls),
                limits=self._limits,
                proxy=httpx.Proxy(proxy) if proxy else None,
                trust_env=False,
            )
            self._pools[key] = pool
        return pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._pool(request).handle_async_request(request)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()


def build_client(
    *,
    max_connections: int = 256,
    kind: Kind = "httpx",
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """The client the lifespan opens and closes. Timeouts are set per request (each provider
    has its own); redirects are never followed (``proxy.upstream`` turns them into 502s).

    ``accept-encoding: identity`` asks providers for the bytes as they are: a compressed
    stream can hold events back in the provider's compressor. A provider that compresses
    anyway is decoded by httpx.
    """
    return httpx.AsyncClient(
        transport=transport or ProviderTransport(max_connections=max_connections, kind=kind),
        follow_redirects=False,
        trust_env=False,
        headers={"accept-encoding": "identity"},
    )
