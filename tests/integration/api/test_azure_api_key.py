"""A client that sends its key in an ``api-key`` header (the SDK's ``AzureOpenAI``) has it
forwarded as it came, when the provider has no key of the proxy's: the provider gets the
header, a 401 to it names that header and quotes the provider's words without the key, and
no log line holds it. With the proxy's own key, or with proxy keys, it stays back."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.replies import error, reply
from tests.fakes.upstream import CHAT, MODELS, FakeUpstream
from tests.integration.api.conftest import Records, StartProxy, write_config

CLIENT_KEY = "azure-client-key-0123456789abcdef"
_CHAT = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
_REFUSED = {
    "error": {
        "code": "401",
        "message": f"Access denied due to invalid subscription key {CLIENT_KEY}.",
    }
}


def test_an_api_key_header_is_forwarded_and_a_401_to_it_names_it(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path, records: Records
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(error(401, _REFUSED), endpoint=MODELS)
    client = openai.AzureOpenAI(
        base_url=proxy.url, api_key=CLIENT_KEY, api_version="2024-10-21", max_retries=0
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        client.models.list()
    sent = fake_upstream.requests[-1].headers
    assert sent.get("api-key") == CLIENT_KEY and "authorization" not in sent
    message = refused.value.message
    assert "the key the client sent in its api-key header" in message, message
    assert "invalid subscription key [REDACTED]" in message and CLIENT_KEY not in message

    fake_upstream.script(reply("hello"), endpoint=CHAT)
    with httpx.Client(base_url=proxy.origin, headers={"api-key": CLIENT_KEY}) as http:
        answer = http.post("/v1/chat/completions", json=_CHAT)
    assert answer.status_code == 200, answer.text
    assert fake_upstream.requests[-1].headers.get("api-key") == CLIENT_KEY
    assert all(CLIENT_KEY not in r.getMessage() for r in records.records)


def test_the_proxys_own_key_goes_in_place_of_a_clients_api_key(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CASCADE_TEST_AZURE_KEY", "sk-the-proxys-own-key-0123")
    provider = {"baseUrl": fake_upstream.url, "apiKeyEnv": "CASCADE_TEST_AZURE_KEY"}
    proxy = start_proxy(write_config(tmp_path / "a.json", "", providers={"openai": provider}))
    fake_upstream.script(reply("hello"), endpoint=CHAT)
    with httpx.Client(base_url=proxy.origin, headers={"api-key": CLIENT_KEY}) as http:
        assert http.post("/v1/chat/completions", json=_CHAT).status_code == 200
    sent = fake_upstream.requests[-1].headers
    assert "api-key" not in sent
    assert sent["authorization"] == "Bearer sk-the-proxys-own-key-0123"


def test_clients_with_different_api_keys_and_no_bearer_are_different_tenants(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Two ``AzureOpenAI``-style clients (an ``api-key``, no bearer) of a pass-through
    proxy: neither lists nor reads the other's session, as two bearers' clients cannot."""
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(reply("hello"), endpoint=CHAT)
    with (
        httpx.Client(base_url=proxy.origin, headers={"api-key": CLIENT_KEY}) as one,
        httpx.Client(base_url=proxy.origin, headers={"api-key": "azure-other-key-98765"}) as two,
    ):
        sent = one.post("/v1/chat/completions", json=_CHAT, headers={"x-session-id": "mine"})
        assert sent.status_code == 200, sent.text
        assert [s["id"] for s in one.get("/v1/sessions").json()["data"]] == ["mine"]
        assert two.get("/v1/sessions").json()["data"] == []
        assert two.get("/v1/sessions/mine").status_code == 404


def test_an_x_api_key_header_is_forwarded_scrubbed_and_never_logged(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path, records: Records
) -> None:
    """``x-api-key`` (Anthropic's clients', several gateways') is a client's key as
    ``api-key`` is: forwarded in the header it came in, its 401 naming that header and
    quoting the provider without it, no log line holding it, and one tenant per key."""
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(error(401, _REFUSED), reply("hello"), endpoint=CHAT)
    with httpx.Client(base_url=proxy.origin, headers={"x-api-key": CLIENT_KEY}) as http:
        refused = http.post("/v1/chat/completions", json=_CHAT, headers={"x-session-id": "x1"})
        assert refused.status_code == 401, refused.text
        message = refused.json()["error"]["message"]
        assert "the key the client sent in its x-api-key header" in message, message
        assert "invalid subscription key [REDACTED]" in message and CLIENT_KEY not in message
        sent = fake_upstream.requests[-1].headers
        assert sent.get("x-api-key") == CLIENT_KEY and "authorization" not in sent
        assert http.post("/v1/chat/completions", json=_CHAT).status_code == 200
        assert [s["id"] for s in http.get("/v1/sessions").json()["data"]] != []
    with httpx.Client(base_url=proxy.origin, headers={"x-api-key": "other-key-98765"}) as other:
        assert other.get("/v1/sessions").json()["data"] == []
    assert all(CLIENT_KEY not in r.getMessage() for r in records.records)
