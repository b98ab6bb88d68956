"""A provider's 401 reaches the client as an OpenAI-shaped 401 that names the provider and
whose key it refused, whatever the provider sent (an OpenAI error, an empty body, an HTML
page, another JSON), and never with the proxy's own ``WWW-Authenticate`` challenge, which
is about the proxy key: a client (the console) tells the two refusals apart by it."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.replies import error, raw
from tests.fakes.upstream import CHAT, EMBEDDINGS, MODELS, FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

PROVIDER_KEY = "sk-provider-unauthorized-0123456789"
CLIENT_KEY = "sk-client-unauthorized-987654321"
_CHAT = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
_OPENAI = {
    "error": {
        "message": f"Incorrect API key provided: {CLIENT_KEY}.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
_HTML = {"content-type": "text/html"}
BODIES = {  # what a provider or a gateway in front of it answers 401 with, no challenge
    "openai": (error(401, _OPENAI), "Incorrect API key provided: [REDACTED]."),
    "empty": (raw("", status=401, headers={}), "no body"),
    "html": (
        raw("<html><body>401 Authorization Required</body></html>", status=401, headers=_HTML),
        "an HTML page",
    ),
    "detail": (error(401, {"detail": "Invalid token"}), ": Invalid token"),
}


def _shaped(resp: httpx.Response, said: str, whose: str) -> dict[str, object]:
    assert resp.status_code == 401, resp.text
    assert "www-authenticate" not in resp.headers
    assert resp.headers["content-type"] == "application/json"
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert (err["type"], err["code"]) == ("invalid_request_error", "invalid_api_key")
    assert err["message"].startswith("the provider 'openai' at http://127.0.0.1:"), err
    assert whose in err["message"] and said in err["message"], err
    assert CLIENT_KEY not in resp.text and PROVIDER_KEY not in resp.text
    return err


@pytest.mark.parametrize("case", list(BODIES))
def test_a_providers_401_is_openai_shaped_and_names_the_provider(
    case: str, start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    answer, said = BODIES[case]
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(answer, answer, endpoint=CHAT)
    fake_upstream.script(answer, endpoint=MODELS)
    fake_upstream.script(answer, endpoint=EMBEDDINGS)
    whose = "the key the client sent"
    with httpx.Client(
        base_url=proxy.origin, headers={"authorization": f"Bearer {CLIENT_KEY}"}
    ) as http:
        _shaped(http.post("/v1/chat/completions", json=_CHAT), said, whose)
        _shaped(http.post("/v1/chat/completions", json={**_CHAT, "stream": True}), said, whose)
        _shaped(http.get("/v1/models"), said, whose)
        _shaped(http.post("/v1/embeddings", json={"model": "e", "input": "a"}), said, whose)


def test_the_proxys_own_key_refused_says_so_and_the_sdk_reads_it(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CASCADE_TEST_401_KEY", PROVIDER_KEY)
    provider = {"baseUrl": fake_upstream.url, "apiKeyEnv": "CASCADE_TEST_401_KEY"}
    proxy = start_proxy(write_config(tmp_path / "a.json", "", providers={"openai": provider}))
    fake_upstream.script(raw("", status=401, headers={}), endpoint=CHAT)
    client = openai.OpenAI(base_url=f"{proxy.origin}/v1", api_key=CLIENT_KEY, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(**_CHAT)  # type: ignore[call-overload]
    assert raised.value.code == "invalid_api_key"
    assert "the proxy's own key for it" in raised.value.message
    assert PROVIDER_KEY not in raised.value.message


def test_a_401_to_a_call_that_carried_no_key_says_so(
    start_proxy: StartProxy,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With proxy keys and no ``apiKeyEnv``, the client's bearer (a proxy key) stays back and
    the provider is called without one: the client's key is not the one to check."""
    monkeypatch.setenv("CASCADE_TEST_401_PROXY_KEY", CLIENT_KEY)
    auth = {"keys": [{"keyEnv": "CASCADE_TEST_401_PROXY_KEY", "tenant": "t"}]}
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url, auth=auth))
    missing = {"error": {"message": "You didn't provide an API key.", "code": None}}
    fake_upstream.script(error(401, missing), endpoint=MODELS)
    with httpx.Client(
        base_url=proxy.origin, headers={"authorization": f"Bearer {CLIENT_KEY}"}
    ) as http:
        err = _shaped(http.get("/v1/models"), "You didn't provide", "no key: none is set")
    assert "the call carried none of the client's" in str(err["message"])
    assert "authorization" not in fake_upstream.requests[-1].headers
