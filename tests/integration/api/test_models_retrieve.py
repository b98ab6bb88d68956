"""``client.models.retrieve(id)`` (``GET /v1/models/{id}``) goes to the provider as
``GET /v1/models`` does: frameworks call it to check a model before they start."""

from __future__ import annotations

import json
import socket

import httpx
import openai
import pytest

from tests.fakes.replies import error, raw
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer


def _model(model_id: str) -> dict:
    return {"id": model_id, "object": "model", "created": 1, "owned_by": "fake"}


@pytest.mark.parametrize("base", ["/v1", "/s/run-1/v1"], ids=["plain", "session-path"])
@pytest.mark.parametrize("model_id", ["gpt-fake", "org/model-7b"], ids=["name", "with-slash"])
def test_one_model_is_the_providers_answer(
    base: str, model_id: str, proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    body = json.dumps(_model(model_id))
    fake_upstream.script(
        raw(body, headers={"content-type": "application/json"}), endpoint="/v1/models/" + model_id
    )
    client = openai.OpenAI(base_url=proxy.origin + base, api_key="sk-test-client", max_retries=0)

    model = client.models.retrieve(model_id)

    assert model.id == model_id
    (seen,) = fake_upstream.requests
    assert (seen.method, seen.path) == ("GET", "/v1/models/" + model_id)
    assert seen.headers["authorization"] == "Bearer sk-test-client"


def test_an_unknown_model_is_the_providers_404(
    client: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    body = {
        "error": {
            "message": "no such model",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }
    fake_upstream.script(error(404, body), endpoint="/v1/models/gpt-nope")

    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("gpt-nope")

    assert caught.value.code == "model_not_found"


@pytest.mark.parametrize("path", ["/v1/models/", "/s/run-1/v1/models/"])
def test_an_empty_model_id_is_an_unknown_url_not_a_provider_call(
    path: str, proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """Regression: ``/v1/models/`` (a trailing slash, no id) went to the provider as
    ``/models/``. OpenAI answers it with an error, not the list: an OpenAI-shaped 404, as for
    any path the proxy has no route for."""
    resp = httpx.get(
        proxy.origin + path, headers={"authorization": "Bearer sk-test-client"}, timeout=10
    )
    assert resp.status_code == 404, resp.text
    assert resp.json()["error"] == {
        "message": f"Invalid URL (GET {path})",
        "type": "invalid_request_error",
        "param": None,
        "code": "unknown_url",
    }
    assert fake_upstream.requests == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/models/../files",
        "/v1/models/%2E%2E/files",
        "/v1/models/..%2Ffiles",
        "/v1/models/org/../../files?purpose=fine-tune",
        "/s/run-1/v1/models/../files",
        "/v1/models/./gpt-fake",
        "/v1/models/..",
        # A ";" opens a segment's parameters, which Tomcat, Jetty and Spring strip before
        # they resolve dot segments; the aiohttp transport sends "%3B" as ";".
        "/v1/models/..;/files",
        "/v1/models/..%3B/files",
        "/v1/models/..;x=1/files",
        "/s/run-1/v1/models/.;/../files",
        # IIS and other Windows servers read a "\\" as a "/".
        "/v1/models/..%5Cfiles",
        "/v1/models/org%5C..%5C..%5Cfiles",
    ],
)
def test_a_dot_segment_in_a_model_id_reaches_no_other_provider_path(
    path: str, proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    """Regression: the id went into the provider's URL as sent, and a ``..`` segment (sent
    as is or percent-encoded) took the call to any path of the provider's host, with the
    proxy's own key when it has one: ``/v1/models/../files`` listed the operator's files, a
    route README says the proxy does not serve. No model id is ``.`` or ``..``: such a path
    is the 404 of a path no route takes, as ``/v1/files`` is."""
    with socket.create_connection(("127.0.0.1", int(proxy.origin.rsplit(":", 1)[1])), 5) as s:
        s.sendall(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            "Authorization: Bearer sk-test-client\r\n\r\n".encode()
        )
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404 "), answer
    assert json.loads(body)["error"]["code"] == "unknown_url"
    assert fake_upstream.requests == []
