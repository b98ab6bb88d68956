"""A client's ``api-key`` header (``AzureOpenAI``'s) is one of its keys: what a call sent
and a refusal scrubs, no key of its query, and, with proxy keys, no header the provider
gets (it may hold the proxy key)."""

from __future__ import annotations

import httpx
from starlette.requests import Request

from proxy.api.deps import upstream_headers
from proxy.config import parse_config
from proxy.credentials import header_secrets, query_key_sent, sent_secrets

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
