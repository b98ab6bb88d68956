"""A provider's error on the models and embeddings routes reaches the client as the
provider sent it, status, body and the headers the SDKs read to retry, plain and under
``/s/{id}/v1``, as a chat's does (test_sdk_retry_headers.py)."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.replies import error
from tests.fakes.upstream import EMBEDDINGS, MODELS, FakeUpstream
from tests.integration.api.conftest import ProxyServer, StartProxy, write_config
from tests.integration.api.errors_helpers import _assert_error_shape, _closed_port

RETRY_HEADERS = {"retry-after": "20", "retry-after-ms": "20000", "x-should-retry": "false"}
BODY = {
    "error": {
        "message": "slow down",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}


@pytest.mark.parametrize("base", ["/v1", "/s/run-1/v1"], ids=["plain", "session-path"])
def test_a_rate_limit_passes_through_with_its_retry_headers(
    base: str, proxy: ProxyServer, fake_upstream: FakeUpstream
) -> None:
    client = openai.OpenAI(base_url=proxy.origin + base, api_key="sk-test", max_retries=0)
    fake_upstream.script(error(429, BODY, RETRY_HEADERS), endpoint=MODELS)
    fake_upstream.script(error(429, BODY, RETRY_HEADERS), endpoint=EMBEDDINGS)

    with pytest.raises(openai.RateLimitError) as listed:
        client.models.list()
    with pytest.raises(openai.RateLimitError) as embedded:
        client.embeddings.create(model="e", input="a")

    for caught in (listed, embedded):
        headers = caught.value.response.headers
        assert {k: headers.get(k) for k in RETRY_HEADERS} == RETRY_HEADERS
        assert caught.value.code == "rate_limit_exceeded"
        assert caught.value.response.json() == BODY


def test_an_unreachable_provider_is_a_502_naming_it_and_the_session(
    start_proxy: StartProxy, tmp_path: Path
) -> None:
    port = _closed_port()
    down = start_proxy(write_config(tmp_path / "down.json", f"http://127.0.0.1:{port}/v1"))
    with httpx.Client(base_url=down.origin, headers={"X-Session-Id": "run-1"}) as http:
        answers = [
            http.get("/v1/models"),
            http.get("/v1/models/gpt-fake"),
            http.post("/v1/embeddings", json={"model": "e", "input": "a"}),
            http.post("/s/run-1/v1/embeddings", json={"model": "e", "input": "a"}),
        ]

    for resp in answers:
        err = _assert_error_shape(resp, 502, "upstream_unreachable")
        assert f"127.0.0.1:{port}" in err["message"]
        assert resp.headers["x-session-id"] == "run-1"
