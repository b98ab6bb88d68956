"""The SDK's ``AzureOpenAI`` client, given the proxy's origin as its ``azure_endpoint``, chats
through ``/openai/deployments/<deployment>/chat/completions``: the deployment is the model,
and the call goes to the configured provider as a ``/v1`` chat does (its path, its key
rules, the client's query with it but for its ``api-version``, the version of Azure's path
API, which Azure's own v1 path refuses); the session-in-path form works too."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.replies import reply
from tests.fakes.upstream import CHAT, FakeUpstream
from tests.integration.api.conftest import StartProxy, write_config

KEY = "azure-client-key-0123456789abcdef"
_HI = [{"role": "user", "content": "hi"}]


def _azure(endpoint: str) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(
        azure_endpoint=endpoint, api_key=KEY, api_version="2024-10-21", max_retries=0
    )


def test_an_azure_client_chats_through_its_deployment_path(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(reply("hello"), reply("streamed"), endpoint=CHAT)
    client = _azure(proxy.origin)
    answer = client.chat.completions.create(model="gpt-fake", messages=_HI)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "hello"
    sent = fake_upstream.requests[-1]
    assert sent.path == CHAT and sent.json["model"] == "gpt-fake"
    assert "api-version" not in sent.query  # Azure's v1 path answers it with a 400
    assert sent.headers.get("api-key") == KEY
    stream = client.chat.completions.create(
        model="gpt-fake",
        messages=[*_HI, {"role": "assistant", "content": "hello"}, *_HI],  # type: ignore[list-item]
        stream=True,
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "streamed"
    assert fake_upstream.requests[-1].json["stream"] is True


def test_the_deployment_is_the_model_whatever_the_body_names(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(reply("hello"), endpoint=CHAT)
    with httpx.Client(base_url=proxy.origin, headers={"api-key": KEY}) as http:
        answer = http.post(
            "/openai/deployments/my-gpt/chat/completions",
            params={"api-version": "2024-10-21", "route": "eu"},
            json={"model": "something-else", "messages": _HI},
        )
    assert answer.status_code == 200, answer.text
    assert fake_upstream.requests[-1].json["model"] == "my-gpt"
    assert fake_upstream.requests[-1].query == "route=eu"  # the rest of the query goes on


def test_the_session_in_the_path_names_an_azure_clients_session(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(reply("hello"), endpoint=CHAT)
    raw = _azure(f"{proxy.origin}/s/azure-sess").chat.completions.with_raw_response.create(
        model="gpt-fake",
        messages=_HI,  # type: ignore[arg-type]
    )
    assert raw.headers["x-session-id"] == "azure-sess"
    with httpx.Client(base_url=proxy.origin, headers={"api-key": KEY}) as http:
        shown = http.get("/v1/sessions/azure-sess")
    assert shown.status_code == 200 and shown.json()["message_count"] == 2, shown.text


def test_an_azure_client_given_the_v1_url_is_told_the_endpoint_to_give(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    client = openai.AzureOpenAI(
        base_url=proxy.url, api_key=KEY, api_version="2024-10-21", max_retries=0
    )
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-fake", messages=_HI)  # type: ignore[arg-type]
    message = missing.value.message
    assert "/v1/deployments/gpt-fake/chat/completions" in message
    assert "give AzureOpenAI the proxy's origin as its azure_endpoint" in message
    with pytest.raises(openai.NotFoundError) as other:  # Azure's paths the proxy does not serve
        _azure(proxy.origin).images.generate(model="dall-e", prompt="a cat")
    assert "/openai/deployments/dall-e/images/generations" in other.value.message
    assert "/openai/deployments/<deployment>/embeddings and /openai/models" in other.value.message
    with httpx.Client(base_url=proxy.origin, headers={"api-key": KEY}) as http:
        unserved = http.get("/v1/models/openai/%2E%2E/files")  # a model id's "openai/"
    assert unserved.status_code == 404 and "Azure" not in unserved.text, unserved.text
    assert not fake_upstream.requests


def test_a_deployment_spelling_a_path_is_no_route_and_reaches_no_provider(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """The deployment is one path segment as the server decodes it: an encoded slash makes
    it several (no route), and an encoded ``..`` is a model's name in the body, never a
    path the provider call takes (it goes to the provider's ``/chat/completions``)."""
    proxy = start_proxy(write_config(tmp_path / "a.json", fake_upstream.url))
    fake_upstream.script(reply("hello"), endpoint=CHAT)
    body = {"messages": _HI}
    with httpx.Client(base_url=proxy.origin, headers={"api-key": KEY}) as http:
        for raw_path in (
            "/openai/deployments/..%2F..%2Fv1%2Fmodels/chat/completions",
            "/openai/deployments/gpt%2Ffake/chat/completions",
        ):
            url = httpx.URL(proxy.origin).copy_with(raw_path=raw_path.encode())
            assert http.post(url, json=body).status_code == 404, raw_path
        assert not fake_upstream.requests
        url = httpx.URL(proxy.origin).copy_with(
            raw_path=b"/openai/deployments/%2E%2E/chat/completions"
        )
        dots = http.post(url, json=body)
    # a model named "..", as a body may name one: the default route's provider, at its chat path
    assert dots.status_code == 200, dots.text
    assert [(r.path, r.json["model"]) for r in fake_upstream.requests] == [(CHAT, "..")]
