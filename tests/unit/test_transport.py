"""proxy.transport: which proxy and which TLS settings each provider's pool gets."""

from __future__ import annotations

import inspect
import os
import socket
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
import uvicorn

from proxy.aiohttp_stream import provider_socket
from proxy.app import create_app
from proxy.config import ConfigError
from proxy.settings import Settings
from proxy.transport import (
    KEEPALIVE_SECONDS,
    RECEIVE_BUFFER_BYTES,
    TLS_EXTENSION,
    Kind,
    ProviderTransport,
    TlsSettings,
    build_client,
    check_proxies,
)

_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_proxies_follow_the_environment_as_httpx_reads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://secure-proxy:3128")
    monkeypatch.setenv("ALL_PROXY", "http://any-proxy:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example,10.0.0.7")
    transport = ProviderTransport(max_connections=4)
    assert transport.proxy_for(httpx.URL("https://api.openai.com/v1")) == (
        "http://secure-proxy:3128"
    )
    assert transport.proxy_for(httpx.URL("http://llm.example/v1")) == "http://any-proxy:3128"
    assert transport.proxy_for(httpx.URL("https://llm.internal.example/v1")) is None
    assert transport.proxy_for(httpx.URL("http://10.0.0.7:8000/v1")) is None


def test_a_cidr_in_no_proxy_sends_every_address_in_it_direct(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As curl (7.86 on) and Go read it: an IP address in the network goes direct, IPv6 too;
    a name goes through the proxy even when it resolves into the network."""
    monkeypatch.setenv("HTTP_PROXY", "http://egress:3128")
    monkeypatch.setenv("NO_PROXY", "10.0.0.0/8, 192.168.0.0/16,fd00::/8,internal.example")
    transport = ProviderTransport(max_connections=4)  # httpx cannot parse fd00::/8 as a key
    direct = [
        "http://10.1.2.3:8000/v1",
        "http://192.168.7.9/v1",
        "http://[fd00::1]:8000/v1",
        "http://llm.internal.example/v1",
    ]
    proxied = ["http://11.0.0.1/v1", "http://[fe80::1]/v1", "http://localhost:8000/v1"]
    assert [transport.proxy_for(httpx.URL(u)) for u in direct] == [None] * len(direct)
    assert {transport.proxy_for(httpx.URL(u)) for u in proxied} == {"http://egress:3128"}


def test_without_proxy_variables_everything_goes_direct() -> None:
    assert ProviderTransport(max_connections=4).proxy_for(httpx.URL("https://a.example")) is None


@pytest.mark.parametrize("kind", ["aiohttp", "httpx"])
def test_a_proxy_the_transport_cannot_speak_to_stops_the_start(
    kind: Kind, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # aiohttp sent a SOCKS proxy plain HTTP (the request, headers and all); httpx without
    # socksio raised ImportError on every call, a 500. Either way: refused at start.
    monkeypatch.setenv("ALL_PROXY", "socks5://user:pw-SECRET@127.0.0.1:1080")
    monkeypatch.setenv("HTTPS_PROXY", "http://egress:3128")  # an http:// one is fine
    config = tmp_path / "agents.json"
    config.write_text("{}")
    settings = Settings(config=config, database_url="postgresql://unused/x", http_transport=kind)
    with pytest.raises(ConfigError, match="egress proxy socks5://127.0.0.1:1080") as refused:
        create_app(settings)
    assert "pw-SECRET" not in str(refused.value)
    monkeypatch.delenv("ALL_PROXY")
    create_app(settings)  # http:// proxies only: starts


@pytest.mark.parametrize(
    "proxy",
    [
        "http://u:pw-SECRET@egress:notaport",
        "http://u:pw-SECRET@egress:99999",
        "http://:3128",
        "http://u:pw-SECRET@[egress:3128",  # a stray bracket: httpx encodes it into the name
        "http://eg ress:3128",
    ],
)
def test_an_egress_proxy_that_is_no_address_stops_the_start(
    proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was taken, and every call through it failed: under httpx a 502 telling the user to
    fix the provider's baseUrl, under aiohttp (a port past 65535) an error no answer maps."""
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    for kind in ("aiohttp", "httpx"):
        with pytest.raises(ConfigError, match="is not a URL with a host and a port") as refused:
            check_proxies(kind)
        assert "pw-SECRET" not in str(refused.value)
        assert "(HTTP_PROXY / HTTPS_PROXY / ALL_PROXY)" in str(refused.value)


@pytest.mark.parametrize("password", ["pw/SECRET", "pw#SECRET", "pw?SECRET"])
def test_a_proxy_password_misread_as_the_address_is_said_to_need_encoding(
    password: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal shows the proxy without its user and password, here a good address:
    it says that what it does not show is what the address was misread from."""
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:{password}@egress:3128")
    with pytest.raises(ConfigError) as refused:
        check_proxies("httpx")
    said = str(refused.value)
    assert "SECRET" not in said
    assert "a / ? # or @ in its user or password must be percent-encoded" in said


@pytest.mark.parametrize(
    "proxy",
    [
        "proxy.corp:3128",  # no scheme, as curl takes it: httpx reads it as http://
        "http://user:pa[ss]@egress:3128",  # a bracket in the password, unencoded
        "http://egress:3128 ",  # an env file's trailing blank
        "http://egress",  # no port: the scheme's
    ],
)
def test_an_egress_proxy_httpx_reads_is_not_refused(
    proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check reads the proxy as the transports do (``httpx.Proxy``, whose URL, auth
    apart, aiohttp is given): one they reach the proxy by is no address problem."""
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    for kind in ("aiohttp", "httpx"):
        check_proxies(kind)
        httpx.Proxy(ProviderTransport(max_connections=1).proxy_for(httpx.URL("https://a.b")))


def test_each_tls_setting_gets_its_own_context(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    transport = ProviderTransport(max_connections=4)
    default = transport.context_for(TlsSettings())
    private = transport.context_for(TlsSettings(ca_file=str(tmp_path / "ca.pem")))
    unchecked = transport.context_for(TlsSettings(verify=False))
    assert default.verify_mode is ssl.CERT_REQUIRED and private.verify_mode is ssl.CERT_REQUIRED
    assert private is not default and len(private.get_ca_certs()) == 1
    assert unchecked.verify_mode is ssl.CERT_NONE and not unchecked.check_hostname
    assert transport.context_for(TlsSettings()) is default  # made once per setting
    with pytest.raises(OSError):
        transport.context_for(TlsSettings(ca_file=str(tmp_path / "missing.pem")))


async def test_a_ca_file_replaced_on_disk_is_trusted_from_the_next_call(tmp_path: Path) -> None:
    """A private CA is rotated where it lives (cert-manager, a mounted Secret, an operator's
    copy): the caFile's path stays, so the config does not change, and the context made from
    the old bundle would reject the provider's new certificate until a restart."""
    bundle = tmp_path / "ca.pem"
    old, new = trustme.CA(), trustme.CA()
    old.cert_pem.write_to_path(str(bundle))
    transport = ProviderTransport(max_connections=4)
    tls = TlsSettings(ca_file=str(bundle))
    request = httpx.Request(
        "GET", "https://llm.internal/v1/models", extensions={TLS_EXTENSION: tls}
    )
    first, first_pool = transport.context_for(tls), transport.pool_for(request)[0]
    assert transport.context_for(tls) is first and transport.pool_for(request)[0] is first_pool
    new.cert_pem.write_to_path(str(tmp_path / "next.pem"))
    os.replace(tmp_path / "next.pem", bundle)
    rotated = transport.context_for(tls)
    assert rotated is not first
    assert rotated.get_ca_certs() != first.get_ca_certs()
    assert transport.pool_for(request)[0] is not first_pool
    bundle.unlink()  # mid-rotation, or a bundle being written: the last one that loaded
    assert transport.context_for(tls) is rotated
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    assert transport.context_for(tls) is rotated
    await transport.aclose()


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
async def test_pools_are_per_origin_and_tls_setting_and_capped(kind: Kind) -> None:
    transport = ProviderTransport(max_connections=3, kind=kind)

    def pool(url: str, tls: TlsSettings | None = None) -> Any:
        extensions = {TLS_EXTENSION: tls} if tls else {}
        return transport.pool_for(httpx.Request("GET", url, extensions=extensions))[0]

    a = pool("https://a.example/v1/x")
    assert pool("https://a.example/other") is a
    assert pool("https://b.example/v1") is not a
    assert pool("https://a.example/v1", TlsSettings(verify=False)) is not a
    assert pool("http://a.example/v1", TlsSettings(verify=False)) is pool("http://a.example/")
    if kind == "httpx":
        assert a._pool._max_connections == 3 and a._pool._keepalive_expiry == KEEPALIVE_SECONDS
    else:
        session = a.get_client()
        assert session.connector.limit == 3
        assert session.connector._keepalive_timeout == KEEPALIVE_SECONDS
        await session.close()
    await transport.aclose()


def test_aiohttp_connections_get_a_bounded_receive_buffer() -> None:
    """Linux grows an eagerly read socket's receive buffer to megabytes; the provider
    connections' is fixed (a stalled client then slows the provider down sooner)."""
    info = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", 0))
    with provider_socket(info) as sock:
        size = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    assert RECEIVE_BUFFER_BYTES <= size <= 2 * RECEIVE_BUFFER_BYTES  # Linux doubles it


async def test_the_client_asks_for_uncompressed_answers_and_follows_no_redirect() -> None:
    client = build_client(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    assert client.headers["accept-encoding"] == "identity"
    assert not client.follow_redirects
    await client.aclose()


def test_idle_provider_connections_close_before_uvicorn_closes_them() -> None:
    """uvicorn (vLLM's server) closes an idle keep-alive connection after 5 s: a request sent
    on one at that moment is reset. The proxy gives idle connections up first."""
    default = inspect.signature(uvicorn.Config).parameters["timeout_keep_alive"].default
    assert default > KEEPALIVE_SECONDS


@pytest.mark.parametrize("content", [None, "not a certificate\n"])
def test_an_unloadable_ssl_cert_file_stops_the_start(
    content: str | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Regression: the proxy started, warned "its caFile None cannot be loaded", and answered
    # every request 502 with the same words, plain-http providers too (every pool is built
    # with the default context): the variable at fault was never named.
    bundle = tmp_path / "ca.pem"
    if content is not None:
        bundle.write_text(content)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    config = tmp_path / "agents.json"
    config.write_text("{}")
    settings = Settings(config=config, database_url="postgresql://unused/x")
    with pytest.raises(ConfigError, match=f"SSL_CERT_FILE {bundle} cannot be loaded"):
        create_app(settings)
    bundle.write_bytes(trustme.CA().cert_pem.bytes())
    create_app(settings)  # a readable bundle: starts
