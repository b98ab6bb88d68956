"""proxy.upstream's error mapping: what a client is told when the provider cannot be reached."""

from __future__ import annotations

import socket
import ssl

import httpx
import pytest

from proxy.config import ProviderConfig
from proxy.errors import UpstreamTimeout, UpstreamUnavailable
from proxy.provider_errors import mapped_errors
from proxy.transport import Kind, build_client
from proxy.upstream import Upstream


def _raised(url: str, exc: BaseException, name: str = "") -> Exception:
    provider = ProviderConfig(base_url=url, name=name)
    with pytest.raises((UpstreamTimeout, UpstreamUnavailable)) as info, mapped_errors(provider):
        raise exc
    assert info.value.__cause__ is exc  # chained, for the log
    return info.value


def _caused_by(cause: BaseException) -> httpx.ConnectError:
    """An httpx error raised from ``cause``, as httpx chains them."""
    try:
        try:
            raise cause
        except BaseException as inner:
            raise httpx.ConnectError("All connection attempts failed") from inner
    except httpx.ConnectError as exc:
        return exc


def test_unreachable_names_the_provider_scheme_host_and_port_only() -> None:
    err = _raised(
        "https://user:s3cret@llm.example:8443/v1/chat/completions",
        _caused_by(ConnectionRefusedError(111, "Connection refused")),
        name="local",
    )
    assert isinstance(err, UpstreamUnavailable)
    assert (
        "could not reach the provider 'local' at https://llm.example:8443: "
        "connection refused (ConnectError)"
    ) in str(err)
    assert "s3cret" not in str(err) and "user" not in str(err)


def test_default_port_is_not_printed_as_an_empty_one() -> None:
    err = _raised("https://api.openai.com/v1/chat/completions", httpx.ConnectError("no route"))
    assert "at https://api.openai.com: " in str(err)


def test_the_cause_is_named_for_dns_and_certificates() -> None:
    dns = _raised(
        "https://llm.example/v1", _caused_by(socket.gaierror(-2, "Name or service not known"))
    )
    assert "name resolution failed (Name or service not known)" in str(dns)
    bad = ssl.SSLCertVerificationError(1, "certificate verify failed")
    bad.verify_message = "unable to get local issuer certificate"
    tls = _raised("https://llm.example/v1", _caused_by(bad))
    assert "certificate verify failed: unable to get local issuer certificate" in str(tls)
    assert "caFile" in str(tls)


def test_a_timeout_is_a_504_naming_the_host() -> None:
    err = _raised("http://127.0.0.1:9/v1/models", httpx.ReadTimeout("timed out"))
    assert isinstance(err, UpstreamTimeout)
    assert "127.0.0.1:9 did not answer in time" in str(err) and "timeoutSeconds" in str(err)
    connect = _raised("http://127.0.0.1:9/v1/models", httpx.ConnectTimeout("timed out"))
    assert isinstance(connect, UpstreamTimeout) and "connectTimeoutSeconds" in str(connect)


def test_other_errors_pass_through_untouched() -> None:
    with pytest.raises(KeyError), mapped_errors(ProviderConfig(base_url="http://127.0.0.1:9/")):
        raise KeyError("not a transport failure")


@pytest.mark.parametrize("kind", ["httpx", "aiohttp"])
@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:99999/v1", "http://[::1/v1", "http://127.0.0.1:0x50/v1", "http://a..b/v1"],
)
async def test_a_base_url_that_does_not_parse_is_a_502(url: str, kind: Kind) -> None:
    upstream = Upstream(build_client(kind=kind), env={})
    with pytest.raises(UpstreamUnavailable) as info:
        await upstream.call(ProviderConfig(base_url=url), "GET", "/models", client_headers={})
    assert "baseUrl" in str(info.value)
    await upstream.client.aclose()


def test_a_key_with_a_trailing_newline_is_sent_without_it() -> None:
    upstream = Upstream(env={"KEY": "sk-abc\n"})
    headers = upstream._headers(ProviderConfig(api_key_env="KEY"), {})
    assert headers["authorization"] == "Bearer sk-abc"
