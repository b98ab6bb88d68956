"""``X-Session-Id`` on the pass-through routes (models, one model, embeddings) is read as on
a chat: a malformed one is the 400 ``invalid_session_id`` before any provider call, and a
valid one is named back in the response's ``X-Session-Id``, as ``/s/{id}/v1/models`` names
the path's. Ignored, a client that sets the header on every call (the openai SDK's
``default_headers``) with a typo would learn of it only at its first chat, and a log line
could not tie a models or embeddings call to its session."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer

CALLS = [
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/gpt-fake", None),
    ("POST", "/v1/embeddings", {"model": "e", "input": "a"}),
]


@pytest.mark.parametrize(("method", "path", "body"), CALLS, ids=[c[1] for c in CALLS])
def test_a_malformed_header_id_is_a_400_and_no_provider_call(
    http: httpx.Client, fake_upstream: FakeUpstream, method: str, path: str, body: object
) -> None:
    resp = http.request(method, path, json=body, headers={"X-Session-Id": "bad id!"})

    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_session_id")
    assert "X-Session-Id" in error["message"]
    assert fake_upstream.requests == []


@pytest.mark.parametrize(("method", "path", "body"), CALLS, ids=[c[1] for c in CALLS])
def test_a_valid_header_id_is_named_back(
    http: httpx.Client, method: str, path: str, body: object
) -> None:
    """On the provider's answer, whatever its status (the fake has no one model: a 404)."""
    resp = http.request(method, path, json=body, headers={"X-Session-Id": "run-7"})

    assert resp.headers.get("x-session-id") == "run-7", resp.text


@pytest.mark.parametrize(("method", "path", "body"), CALLS, ids=[c[1] for c in CALLS])
def test_an_empty_header_is_no_header(
    http: httpx.Client, fake_upstream: FakeUpstream, method: str, path: str, body: object
) -> None:
    """``X-Session-Id:`` sent empty (a client filling it from an unset variable) names no
    session, as an empty query value or ``CASCADE_*`` variable is unset: the provider's
    answer, as without the header, not a 400."""
    without = http.request(method, path, json=body)
    resp = http.request(method, path, json=body, headers={"X-Session-Id": ""})

    assert resp.status_code == without.status_code, resp.text
    assert "x-session-id" not in resp.headers
    assert len(fake_upstream.requests) == 2


def test_a_chat_with_an_empty_header_is_in_its_derived_session(http: httpx.Client) -> None:
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]}
    resp = http.post("/v1/chat/completions", json=body, headers={"X-Session-Id": ""})

    assert resp.status_code == 200, resp.text
    assert resp.headers["x-session-id"].startswith("auto-")


def test_the_path_id_wins_over_the_header_as_on_a_chat(http: httpx.Client) -> None:
    resp = http.get("/s/run-7/v1/models", headers={"X-Session-Id": "bad id!"})

    assert resp.status_code == 200, resp.text
    assert resp.headers["x-session-id"] == "run-7"


def test_the_sdk_with_a_default_header_sees_the_typo_at_once(
    proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    client = openai.OpenAI(
        base_url=proxy.url,
        api_key="sk-test-client",
        max_retries=0,
        default_headers={"X-Session-Id": "my run"},
    )

    with pytest.raises(openai.BadRequestError) as caught:
        client.models.list()
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="e", input="a")

    assert caught.value.code == "invalid_session_id"
    assert fake_upstream.requests == []
