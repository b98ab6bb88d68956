"""A client's ``api-key`` header (``AzureOpenAI``'s), or its ``x-api-key`` (Anthropic's, and
several gateways'), is one of its keys: what a call sent
and a refusal scrubs, no key of its query, and, with proxy keys, no header the provider
gets (it may hold the proxy key)."""

from __future__ import annotations

import httpx
from starlette.requests import Request

from proxy.api.deps import tenant_of, upstream_headers
from proxy.config import ProviderConfig, parse_config
from proxy.credentials import header_secrets, query_key_sent, sent_secrets
from proxy.upstream import Upstream

KEY = "azure-key-0123456789"


def _call(url: str = "http://p/v1/chat/completions") -> httpx.Request:
    return httpx.Request("POST", url, headers={"api-key": KEY})


def test_an_api_key_header_is_a_credential_the_call_sent_in_no_query() -> None:
    assert KEY in header_secrets(_call()) and KEY in sent_secrets(_call())
    assert not query_key_sent(_call())
    assert query_key_sent(_call("http://p/v1/chat/completions?api-key=another-key-987654"))


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "headers": raw, "query_string": b""})


def test_with_proxy_keys_a_clients_api_key_stays_back() -> None:
    sent = {"api-key": KEY, "authorization": "Bearer proxy-key-123456", "user-agent": "x"}
    keyed = parse_config({"auth": {"keys": [{"keyEnv": "K", "tenant": "t"}]}})
    assert dict(upstream_headers(_request(sent), keyed)) == {"user-agent": "x"}
    assert upstream_headers(_request(sent), parse_config({}))["api-key"] == KEY


def test_without_proxy_keys_an_api_key_header_is_its_senders_tenant() -> None:
    """Pass-through, a client's ``api-key`` is its tenant as its bearer would be: two
    ``AzureOpenAI`` clients with different keys and no bearer never share ``anonymous``
    (each would see the other's sessions and memory), and one key is one tenant however
    it is sent; beside a bearer token, the two together are, as with a key in the query (a
    placeholder bearer beside a real ``api-key`` is no tenant every such client shares)."""
    keyless = parse_config({})
    one = tenant_of(_request({"api-key": KEY}), keyless)
    assert one == tenant_of(_request({"authorization": f"Bearer {KEY}"}), keyless)
    assert one != tenant_of(_request({"api-key": "another-key-987654"}), keyless)
    assert "anonymous" not in (one, tenant_of(_request({"api-key": " another "}), keyless))
    assert tenant_of(_request({"api-key": "  "}), keyless) == "anonymous"
    placeholder = tenant_of(_request({"authorization": "Bearer EMPTY"}), keyless)
    both = tenant_of(_request({"authorization": "Bearer EMPTY", "api-key": KEY}), keyless)
    assert both not in (one, placeholder, "anonymous")
    same = {"authorization": f"Bearer {KEY}", "api-key": KEY}
    assert tenant_of(_request(same), keyless) == one


def test_an_x_api_key_header_is_a_key_as_an_api_key_header_is() -> None:
    """Sent in ``x-api-key``, a client's key is a credential the call sent (scrubbed), stays
    back with proxy keys, and is its sender's tenant as the same key in ``api-key`` is."""
    call = httpx.Request("POST", "http://p/v1/chat/completions", headers={"x-api-key": KEY})
    assert KEY in header_secrets(call) and not query_key_sent(call)
    sent = {"x-api-key": KEY, "authorization": "Bearer proxy-key-123456", "user-agent": "x"}
    keyed = parse_config({"auth": {"keys": [{"keyEnv": "K", "tenant": "t"}]}})
    assert dict(upstream_headers(_request(sent), keyed)) == {"user-agent": "x"}
    keyless = parse_config({})
    assert upstream_headers(_request(sent), keyless)["x-api-key"] == KEY
    one = tenant_of(_request({"x-api-key": KEY}), keyless)
    assert one == tenant_of(_request({"api-key": KEY}), keyless) != "anonymous"
    assert one != tenant_of(_request({"x-api-key": "another-key-987654"}), keyless)
    assert tenant_of(_request({"x-api-key": " "}), keyless) == "anonymous"


def test_a_providers_own_key_goes_alone_whatever_key_headers_the_client_sent() -> None:
    """An Anthropic-style client sends ``x-api-key`` (and maybe an ``api-key`` of another
    value): to a provider with a key of the proxy's (``apiKeyEnv``) only that key goes; to
    one without, each of the client's as it came, neither over the other."""
    sent = {"x-api-key": KEY, "api-key": "azure-other-0123456789", "user-agent": "x"}
    upstream = Upstream(httpx.AsyncClient(), env={"OWN": "sk-own-0123456789abcdef"})
    own = ProviderConfig(base_url="http://p/v1", api_key_env="OWN")
    headers = upstream._request(
        own, "POST", "/chat/completions", client_headers=sent, content=b"{}", params=None
    ).headers
    assert headers["authorization"] == "Bearer sk-own-0123456789abcdef"
    assert "x-api-key" not in headers and "api-key" not in headers
    bare = ProviderConfig(base_url="http://p/v1")
    headers = upstream._request(
        bare, "POST", "/chat/completions", client_headers=sent, content=b"{}", params=None
    ).headers
    assert (headers["x-api-key"], headers["api-key"]) == (KEY, "azure-other-0123456789")
    assert "authorization" not in headers
