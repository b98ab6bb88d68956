"""The process's one ``httpx.AsyncClient`` to providers, and the transport that routes it.

``build_client`` makes the client the lifespan owns. Its transport, ``ProviderTransport``,
keeps one ``httpx.AsyncHTTPTransport`` (one connection pool) per provider origin and TLS
setting, made on first use, so that:

- each provider gets its own cap on connections (``Limits``) and its own keep-alive pool;
- each provider's ``caFile`` / ``verifyTls`` applies to it alone (one ``SSLContext`` per
  setting, shared by every origin that uses it);
- a provider added by a config reload gets its pool without a new client, and the pool of
  one a reload removed or changed, or of a rotated ``caFile``, is closed once no request
  uses it (``keep_only``, ``proxy.pool_use``).

A client given a transport ignores the proxy variables (httpx mounts them only on a client
built without one), so ``ProviderTransport`` applies them itself, with httpx's own reading of
``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and ``NO_PROXY`` and its own pattern matching:
each origin goes through the proxy httpx would pick for it, or direct. A CIDR in ``NO_PROXY``
(``10.0.0.0/8``, ``fd00::/8``) sends every IP address in it direct, as curl (7.86 on) and Go
do; httpx reads one as a single host (``_no_proxy_networks``). ``SSL_CERT_FILE`` and
``SSL_CERT_DIR`` choose the trusted CAs as in httpx (``create_ssl_context``); a provider's
``caFile`` replaces them for that provider.

``kind`` picks what each pool is: ``aiohttp`` (``httpx_aiohttp.AiohttpTransport``, the
default: the same httpx client and responses over aiohttp's connection pool, which costs less
CPU per request) or ``httpx`` (httpx's own ``AsyncHTTPTransport``). Both get the same limits,
proxy and ``SSLContext``; ``CASCADE_HTTP_TRANSPORT`` chooses.

aiohttp's pool reads a streamed answer as its bytes arrive, over connections with a bounded
receive buffer (``aiohttp_stream.py``), so that a break loses nothing read before it and a
stalled client slows the provider down.

Tests hand ``build_client`` an ``httpx.MockTransport`` instead (``create_app(...,
http_transport=...)``); everything else about the client stays the same.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import ssl
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Literal
from urllib.request import getproxies

import httpx
from httpx._utils import URLPattern, get_environment_proxies

from proxy.aiohttp_stream import (
    READ_AHEAD_BYTES,
    RECEIVE_BUFFER_BYTES,
    STREAM_EXTENSION,
    ReadAhead,
    read_ahead_transport,
)
from proxy.config import Config, ConfigError, ProviderConfig
from proxy.pool_use import PoolUse, Released

__all__ = [
    "ca_file_failures",
    "check_ca_files",
    "check_proxies",
    "check_trust",
    "refuse_ca_files",
    "ProviderTransport",
    "TlsSettings",
    "TLS_EXTENSION",
    "STREAM_EXTENSION",
    "READ_AHEAD_BYTES",
    "RECEIVE_BUFFER_BYTES",
    "ReadAhead",
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


def _no_proxy_networks() -> dict[str, ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``NO_PROXY``'s CIDR entries, each under the key httpx's ``get_environment_proxies``
    makes of it. httpx matches such a key as the one host it names (the network's first
    address) and cannot parse an IPv6 one at all, so ``ProviderTransport`` leaves these keys
    out and matches the networks itself. As in curl and Go, only a provider named by an IP
    address is in one: no name is resolved to decide."""
    networks: dict[str, ipaddress.IPv4Network | ipaddress.IPv6Network] = {}
    for entry in (e.strip() for e in getproxies().get("no", "").split(",")):
        try:
            network = ipaddress.ip_network(entry, strict=False) if "/" in entry else None
        except ValueError:
            network = None  # not a CIDR: httpx's reading of it stands
        if network is not None:
            networks[f"all://[{entry}]" if network.version == 6 else f"all://{entry}"] = network
    return networks


def check_proxies(kind: Kind) -> None:
    """Refuse at start an egress proxy ``kind`` cannot speak to, instead of failing every
    call through it: aiohttp speaks to http:// and https:// proxies only (it would send a
    SOCKS proxy plain HTTP), httpx to SOCKS too once ``socksio`` is installed."""
    usable = {"http", "https"}
    if kind == "httpx" and importlib.util.find_spec("socksio") is not None:
        usable |= {"socks5", "socks5h"}
    for proxy in get_environment_proxies().values():
        scheme, _, rest = (proxy or "").partition("://")
        shown = f"{scheme}://{rest.rpartition('@')[2]}"  # never its user:password
        if proxy and not _usable_address(proxy):  # each call through it would fail
            unshown = " as read: a / ? # or @ in its user or password must be percent-encoded"
            raise ConfigError(
                f"the egress proxy {shown} (HTTP_PROXY / HTTPS_PROXY / ALL_PROXY) is not a URL"
                f" with a host and a port 1-65535{unshown if '@' in rest else ''}"
            )
        if proxy and scheme.lower() not in usable:
            hint = {
                "aiohttp": "; for SOCKS set CASCADE_HTTP_TRANSPORT=httpx and install socksio",
                "httpx": "" if "socks5" in usable else "; for a SOCKS proxy install socksio",
            }[kind]
            raise ConfigError(
                f"the egress proxy {shown} (HTTP_PROXY / HTTPS_PROXY / ALL_PROXY) is not one"
                f" CASCADE_HTTP_TRANSPORT={kind} can use: it takes"
                f" {', '.join(sorted(s + '://' for s in usable))} proxies{hint}"
            )


def _usable_address(url: str) -> bool:
    """Whether ``url``, read as the transports read it (``httpx.Proxy``), has a host httpx
    need not encode (an IPv6 zone's ``%25`` apart) and no port outside 1-65535."""
    try:
        u = httpx.URL(url)
    except httpx.InvalidURL:  # a port that is no number
        return False
    named = bool(u.host) and ("%" not in u.host or ":" in u.host)
    return named and (u.port is None or 0 < u.port < 65536)


def check_trust() -> None:
    """Refuse at start an ``SSL_CERT_FILE`` (or ``SSL_CERT_DIR``) that cannot be loaded,
    naming it: every provider without a ``caFile`` trusts it, and every pool is built with
    that context, plain-http ones too, so each call would otherwise fail as a 502."""
    name = "SSL_CERT_FILE" if os.environ.get("SSL_CERT_FILE") else "SSL_CERT_DIR"
    if not os.environ.get(name):  # certifi's bundle, which ships with httpx
        return
    try:
        httpx.create_ssl_context(trust_env=True)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
        raise ConfigError(
            f"{name} {os.environ.get(name)} cannot be loaded ({type(exc).__name__}: {reason});"
            " it names the CAs every provider without a caFile trusts: fix or unset it"
        ) from None


class ProviderTransport(httpx.AsyncBaseTransport):
    """One pooled ``AsyncHTTPTransport`` per (origin, proxy, TLS settings); see the module."""

    def __init__(self, *, max_connections: int, kind: Kind = "aiohttp") -> None:
        if kind == "aiohttp":
            self._make: type[httpx.AsyncBaseTransport] = read_ahead_transport()
        else:
            self._make = httpx.AsyncHTTPTransport
        self._limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=KEEPALIVE_SECONDS,
        )
        networks = _no_proxy_networks()
        self._direct = tuple(networks.values())
        patterns = {
            URLPattern(key): url
            for key, url in get_environment_proxies().items()
            if key not in networks
        }
        self._proxies = sorted(patterns.items())  # most specific first, as httpx orders them
        self._contexts: dict[TlsSettings, tuple[object, ssl.SSLContext]] = {}
        self._pools: dict[tuple[object, ...], httpx.AsyncBaseTransport] = {}
        self._live: set[tuple[tuple[object, ...], TlsSettings]] | None = None  # keep_only's
        self.use = PoolUse()

    def proxy_for(self, url: httpx.URL) -> str | None:
        """The proxy httpx's environment rules pick for ``url`` (an IP address in a ``NO_PROXY``
        network goes direct, see ``_no_proxy_networks``); None to go direct."""
        if self._direct:
            try:
                address = ipaddress.ip_address(url.host)
            except ValueError:
                address = None  # a name
            if address is not None and any(address in net for net in self._direct):
                return None
        for pattern, proxy in self._proxies:
            if pattern.matches(url):
                return proxy
        return None

    def context_for(self, tls: TlsSettings) -> ssl.SSLContext:
        """The ``SSLContext`` for a provider's TLS settings: made once per setting, and again
        once its ``caFile`` is replaced or rewritten, so a private CA rotated where it lives
        is trusted from the next call, with no restart and no change to the config. While
        the file is missing, or holds no bundle that loads (one being written), the last
        context that loaded stays.

        An unreadable ``caFile`` with no context before it raises ``OSError`` or
        ``ssl.SSLError``; the caller maps it.
        """
        stamp = _file_stamp(tls.ca_file) if tls.verify and tls.ca_file else None
        held = self._contexts.get(tls)
        if held is not None and stamp in (held[0], None):
            return held[1]
        try:
            if not tls.verify:
                ctx = httpx.create_ssl_context(verify=False)
            elif tls.ca_file:
                ctx = ssl.create_default_context(cafile=tls.ca_file)
            else:
                ctx = httpx.create_ssl_context(trust_env=True)  # SSL_CERT_FILE / _DIR
        except (OSError, ssl.SSLError):
            if held is None:
                raise
            ctx = held[1]  # tried once per change of the file, not on every call
        self._contexts[tls] = (stamp, ctx)
        return ctx

    def pool_for(self, request: httpx.Request) -> tuple[httpx.AsyncBaseTransport, bool]:
        """The request's pool, and whether it is kept for later requests. One made for a
        rotated ``caFile``'s context retires the pool of the context before it; one for an
        origin the config in force names no more (a request begun before its reload) is
        not kept: the caller retires it once it holds it, so it closes after the request."""
        url = request.url
        tls = request.extensions.get(TLS_EXTENSION, _DEFAULT_TLS)
        if url.scheme != "https":
            tls = _DEFAULT_TLS  # plain http: no certificate to check
        proxy = self.proxy_for(url)
        ctx = self.context_for(tls)  # a new one for a rotated caFile: a pool of its own
        key = (url.scheme, url.host, url.port, proxy, tls, id(ctx))
        pool = self._pools.get(key)
        if pool is None:
            pool = self._make(  # type: ignore[call-arg]
                verify=ctx,
                limits=self._limits,
                proxy=httpx.Proxy(proxy) if proxy else None,
                trust_env=False,
            )
            for old in [k for k in self._pools if k[:5] == key[:5]]:
                self.use.retire(self._pools.pop(old))  # closed once its requests are done
            if self._live is not None and (key[:3], tls) not in self._live:
                return pool, False
            self._pools[key] = pool
        return pool, True

    def keep_only(self, cfg: Config) -> None:
        """Retire the pools of origins and TLS settings no provider of ``cfg`` has (a
        provider a reload removed, or moved, or gave another ``caFile``): each closes once
        no request uses it; left open, each held its connections until shutdown."""
        live: set[tuple[tuple[object, ...], TlsSettings]] = set()
        for provider in cfg.providers.values():
            url = httpx.URL(provider.base_url)
            tls = _tls(provider) if url.scheme == "https" else _DEFAULT_TLS
            live.add(((url.scheme, url.host, url.port), tls))
        self._live = live
        for key in [k for k in self._pools if (k[:3], k[4]) not in live]:
            self.use.retire(self._pools.pop(key))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        pool, kept = self.pool_for(request)
        release = self.use.hold(pool)
        if not kept:
            self.use.retire(pool)  # held: it closes once this request is done
        try:
            response = await pool.handle_async_request(request)
        except BaseException:
            release()
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = Released(response.stream, release)
        return response

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()
        await self.use.aclose()


def ca_file_failures(
    transport: ProviderTransport | None, cfg: Config, before: Config | None = None
) -> list[tuple[str, str, str]]:
    """Each provider whose ``caFile`` does not load, as its name, the file and why, in name
    order: ``context_for``'s load (with a ``transport``, the one its requests use, which is
    then built; else a new one). With ``before``, only providers whose TLS settings
    ``before`` did not have: one already in force keeps its last bundle while the file is
    replaced."""
    seen = set() if before is None else {_tls(p) for p in before.providers.values()}
    out = []
    for name, provider in sorted(cfg.providers.items()):
        tls = _tls(provider)
        if not (tls.verify and tls.ca_file) or tls in seen:
            continue
        try:
            if transport is not None:
                transport.context_for(tls)
            else:
                ssl.create_default_context(cafile=tls.ca_file)
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
            out.append((name, tls.ca_file, f"{type(exc).__name__}: {reason}"))
    return out


def check_ca_files(
    transport: ProviderTransport | None, cfg: Config, before: Config | None = None
) -> list[str]:
    """What is wrong with each provider's ``caFile`` that does not load
    (``ca_file_failures``), one line each naming the key."""
    return [
        f"providers.{name}.caFile: {ca_file} cannot be loaded ({why}); its requests would "
        "answer 502"
        for name, ca_file, why in ca_file_failures(transport, cfg, before)
    ]


def refuse_ca_files(transport: ProviderTransport, new: Config, current: Config) -> None:
    """A reload's ``ConfigHolder.vet``: a ``caFile`` new to it that cannot be loaded refuses
    the file (``config.rejected``, the config in force kept), which would otherwise take
    effect and turn each of the provider's requests into a 502."""
    if problems := check_ca_files(transport, new, current):
        raise ConfigError("; ".join(problems))


def _tls(provider: ProviderConfig) -> TlsSettings:
    return TlsSettings(provider.ca_file, provider.verify_tls)


def _file_stamp(path: str) -> tuple[int, int, int] | None:
    """What changes when a file is replaced or rewritten; None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def build_client(
    *,
    max_connections: int = 256,
    kind: Kind = "aiohttp",
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """The client the lifespan opens and closes. Timeouts are set per request (each provider
    has its own); redirects are never followed (``proxy.upstream`` turns them into 502s).

    ``accept-encoding: identity`` asks providers for the bytes as they are: a compressed
    stream can hold events back in the provider's compressor. A provider that compresses
    anyway is decoded by httpx (``proxy.upstream.DECODED_ENCODINGS``), over aiohttp too:
    httpx-aiohttp turns aiohttp's own decompression off and hands httpx the bytes as sent.

    No cookie a provider sets is kept: the client serves every tenant, so a cookie one
    request was given would go out with everyone's later requests to that provider.
    """
    return httpx.AsyncClient(
        transport=transport or ProviderTransport(max_connections=max_connections, kind=kind),
        follow_redirects=False,
        trust_env=False,
        headers={"accept-encoding": "identity"},
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
    )
