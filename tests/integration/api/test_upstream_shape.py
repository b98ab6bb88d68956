"""The shape of what the proxy sends a provider and makes of its answer, on an
``httpx.MockTransport`` given to ``create_app(..., http_transport=...)``: no sockets to the
provider, so each case is a plain function of the request."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from proxy.app import create_app
from proxy.settings import Settings
from tests.integration.api.conftest import write_config

Handler = Callable[[httpx.Request], httpx.Response]
COMPLETION = {
    "id": "chatcmpl-m",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-fake",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "mocked"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


@pytest.fixture
def proxy(db_dsn: str, tmp_path: Path) -> Iterator[Callable[[Handler], TestClient]]:
    clients: list[TestClient] = []

    def start(handler: Handler) -> TestClient:
        config = write_config(tmp_path / "agents.json", "http://u:s3cret%40x@provider.mock/v1")
        app = create_app(
            Settings(database_url=db_dsn, config=config, watch_config=False),
            http_transport=httpx.MockTransport(handler),
        )
        client = TestClient(app).__enter__()
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def test_the_provider_gets_a_clean_request_and_a_compressed_answer_is_decoded(
    proxy: Callable[[Handler], TestClient],
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            content=gzip.compress(json.dumps(COMPLETION).encode()),
            headers={
                "content-type": "application/json",
                "content-encoding": "gzip",
                "x-request-id": "req-1",
            },
        )

    resp = proxy(handler).post(
        "/v1/chat/completions",
        headers={
            "authorization": "Bearer sk-client",
            "x-session-id": "shape",
            "user-agent": "agent/1",
        },
        json={"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]},
    )

    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "mocked"
    assert "content-encoding" not in resp.headers
    assert resp.headers["x-upstream-request-id"] == "req-1"
    (request,) = seen
    assert str(request.url) == "http://provider.mock/v1/chat/completions"  # no user:password
    assert request.headers["authorization"] == "Bearer sk-client"  # not the URL's Basic
    assert request.headers["accept-encoding"] == "identity"
    assert request.headers["user-agent"] == "agent/1"
    assert "x-session-id" not in request.headers
    assert json.loads(request.content)["messages"][-1] == {"role": "user", "content": "hi"}


def test_a_base_urls_credentials_are_sent_when_nothing_else_is(
    proxy: Callable[[Handler], TestClient],
) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"object": "list", "data": []})

    assert proxy(handler).get("/v1/models", params={"a": "1"}).status_code == 200
    (request,) = seen
    assert str(request.url) == "http://provider.mock/v1/models?a=1"
    assert request.headers["authorization"] == "Basic dTpzM2NyZXRAeA=="  # u:s3cret@x


def test_a_redirect_is_a_502_naming_the_provider_not_its_secret(
    proxy: Callable[[Handler], TestClient],
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(307, headers={"location": "http://elsewhere.mock/v1/models"})

    resp = proxy(handler).get("/v1/models", headers={"authorization": "Bearer sk-client"})

    assert resp.status_code == 502
    message = resp.json()["error"]["message"]
    assert message.startswith("the provider 'openai' at http://provider.mock answered 307")
    assert "http://elsewhere.mock/v1/models" in message and "s3cret" not in message


LOG = "".join(f"log line {i}\n" for i in range(4000))


@pytest.mark.parametrize(
    "shape",
    [{}, {"functions": [{"name": "run", "parameters": {"type": "object"}}]}],
    ids=["no-tools", "functions"],
)
def test_a_cut_result_adds_no_tool_to_a_request_that_sends_none(
    proxy: Callable[[Handler], TestClient], shape: dict[str, Any]
) -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json=COMPLETION)

    call = {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": LOG},
    ]
    resp = proxy(handler).post(
        "/v1/chat/completions",
        headers={"authorization": "Bearer sk-client", "x-session-id": "cut-no-tools"},
        json={"model": "gpt-fake", "messages": messages, **shape},
    )

    assert resp.status_code == 200
    (body,) = bodies
    assert set(body) == {"model", "messages", *shape}  # the client's shape, nothing added
    assert body.get("functions") == shape.get("functions")
    cut = body["messages"][2]["content"]
    assert "[... truncated " in cut and "read_tool_output" not in cut


def test_the_providers_account_headers_stay_back(proxy: Callable[[Handler], TestClient]) -> None:
    """OpenAI names the organization and project a call was billed to: with the proxy's own
    key, the operator's, which every tenant would read; its rate limits and timing go on."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            json=COMPLETION,
            headers={
                "openai-organization": "org-operator",
                "openai-project": "proj_operator",
                "openai-processing-ms": "12",
                "openai-version": "2020-10-01",
                "x-ratelimit-remaining-requests": "99",
            },
        )

    resp = proxy(handler).post(
        "/v1/chat/completions",
        headers={"x-session-id": "account"},
        json={"model": "gpt-fake", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert resp.status_code == 200
    assert "openai-organization" not in resp.headers and "openai-project" not in resp.headers
    assert resp.headers["openai-processing-ms"] == "12"
    assert resp.headers["openai-version"] == "2020-10-01"
    assert resp.headers["x-ratelimit-remaining-requests"] == "99"
