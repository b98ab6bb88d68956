"""proxy.upstream's error mapping: what a client is told when the provider cannot be reached."""

from __future__ import annotations

import pytest

from proxy.config import ProviderConfig
from proxy.errors import UpstreamTimeout, UpstreamUnavailable
from proxy.h1client import ProviderConnectionError
from proxy.upstream import Upstream, _mapped_errors


def _raised(url: str, exc: BaseException) -> Exception:
    with pytest.raises((UpstreamTimeout, UpstreamUnavailable)) as info, _mapped_errors(url):
        raise exc
    return info.value


def test_unreachable_names_scheme_host_and_port_only() -> None:
    err = _raised("https://user:s3cret@llm.example:8443/v1/chat/completions",
                  ProviderConnectionError("refused"))
    assert isinstance(err, UpstreamUnavailable)
    assert "https://llm.example:8443 (ProviderConnectionError)" in str(err)
    assert "s3cret" not in str(err) and "user" not in str(err)


def test_default_port_is_not_printed_as_an_empty_one() -> None:
    err = _raised("https://api.openai.com/v1/chat/completions", OSError("no route"))
    assert "at https://api.openai.com (OSError)" in str(err)


def test_a_timeout_is_a_504_naming_the_host() -> None:
    err = _raised("http://127.0.0.1:9/v1/models", TimeoutError())
    assert isinstance(err, UpstreamTimeout)
    assert "127.0.0.1 did not answer in time" in str(err) and "timeoutSeconds" in str(err)


def test_other_errors_pass_through_untouched() -> None:
    with pytest.raises(KeyError), _mapped_errors("http://127.0.0.1:9/"):
        raise KeyError("not a transport failure")


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "http://[::1/v1",
                                 "http://127.0.0.1:0x50/v1", "http://a..b/v1"])
async def test_a_base_url_that_does_not_parse_is_a_502(url: str) -> None:
    upstream = Upstream(env={})
    with pytest.raises(UpstreamUnavailable) as info:
        await upstream.call(ProviderConfig(base_url=url), "GET", "/models", client_headers={})
    assert "baseUrl" in str(info.value)
    await upstream.client.aclose()


def test_a_key_with_a_trailing_newline_is_sent_without_it() -> None:
    upstream = Upstream(env={"KEY": "sk-abc\n"})
    headers = upstream._headers(ProviderConfig(api_key_env="KEY"), {})
    assert headers["authorization"] == "Bearer sk-abc"
