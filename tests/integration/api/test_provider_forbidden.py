"""A provider's 403 as the official SDK reads it through the proxy: a firewall's HTML page
(Cloudflare's), which the SDK would quote whole as its message, the proxy's address in it,
reaches the client as an OpenAI-shaped 403 naming the provider, and the SDK still raises
``PermissionDeniedError``; and a refusal to a call that carried a client's key in the query
(Azure's ``?api-key=``) beside the proxy's own key names both."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.fakes.replies import error, raw
from tests.fakes.upstream import CHAT, MODELS, FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, write_config

_CHAT = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
_PAGE = (
    "<!DOCTYPE html><html><head><title>Attention Required! | Cloudflare</title></head>"
    "<body><h1>Sorry, you have been blocked</h1><span>Your IP: 203.0.113.9</span></body></html>"
)
PROXY_KEY = "sk-proxy-forbidden-0123456789"
OWN_KEY = "sk-own-forbidden-0123456789"
QUERY_KEY = "azure-query-key-0123456789"


def test_a_firewalls_403_page_is_a_permission_error_naming_the_provider(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    page = raw(_PAGE, status=403, headers={"content-type": "text/html", "cf-ray": "8a1b2c3d"})
    fake_upstream.script(page, page, endpoint=CHAT)
    fake_upstream.script(page, endpoint=MODELS)
    client = openai.OpenAI(base_url=f"{proxy.origin}/v1", api_key="sk-client-x", max_retries=0)
    calls = [
        lambda: client.chat.completions.create(**_CHAT),  # type: ignore[call-overload]
        lambda: client.chat.completions.create(**_CHAT, stream=True),  # type: ignore[call-overload]
        lambda: client.models.list(),
    ]
    for call in calls:
        with pytest.raises(openai.PermissionDeniedError) as raised:
            call()
        err = raised.value
        assert err.code == "provider_forbidden" and err.type == "request_forbidden", err.body
        said = "Error code: 403 - the provider 'openai' at http://127.0.0.1:"
        assert err.message.startswith(said), err.message
        assert "answered 403 to the key the client sent" in err.message
        assert err.message.endswith("an HTML page titled 'Attention Required! | Cloudflare'")
        assert "203.0.113.9" not in err.response.text and "<" not in err.response.text
        assert "cf-ray" not in err.response.headers


@pytest.mark.parametrize("own", [True, False], ids=["own-key", "no-own-key"])
def test_a_401_to_a_query_key_beside_the_proxys_names_whose_went(
    own: bool,
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    records: Records,
) -> None:
    """Proxy keys; the client's Azure-style ``?api-key=`` goes upstream, the proxy key in its
    ``Authorization`` stays back. With ``apiKeyEnv`` the message, and the operator's log
    line, named that key alone."""
    monkeypatch.setenv("CASCADE_TEST_403_PROXY_KEY", PROXY_KEY)
    provider: dict[str, object] = {"baseUrl": fake_upstream.url, "timeoutSeconds": 10}
    if own:
        monkeypatch.setenv("CASCADE_TEST_403_OWN_KEY", OWN_KEY)
        provider["apiKeyEnv"] = "CASCADE_TEST_403_OWN_KEY"
    auth = {"keys": [{"keyEnv": "CASCADE_TEST_403_PROXY_KEY", "tenant": "t"}]}
    config = write_config(tmp_path / "a.json", "", providers={"openai": provider}, auth=auth)
    proxy = start_proxy(config)
    fake_upstream.script(error(401, {"error": {"message": "Access denied.", "code": "401"}}))
    client = openai.OpenAI(
        base_url=f"{proxy.origin}/v1",
        api_key=PROXY_KEY,
        default_query={"api-version": "2024-06-01", "api-key": QUERY_KEY},
        max_retries=0,
    )
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(**_CHAT)  # type: ignore[call-overload]
    sent = fake_upstream.requests[-1]
    assert sent.headers.get("authorization") == (f"Bearer {OWN_KEY}" if own else None)
    whose = raised.value.message.split("answered 401 to ", 1)[1]
    assert "the key the client sent in the query" in whose, whose
    assert ("the proxy's own key" in whose) == own, whose
    assert whose.endswith(": Access denied."), whose
    for secret in (PROXY_KEY, OWN_KEY, QUERY_KEY):
        assert secret not in raised.value.response.text
    lines = [r.getMessage() for r in records.records if "answered 401" in r.getMessage()]
    assert len(lines) == 1, lines
    if own:
        assert "$CASCADE_TEST_403_OWN_KEY and a key the client sent in the query" in lines[0]
        assert lines[0].endswith("(check that variable's key, or the client's)"), lines
