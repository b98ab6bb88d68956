"""A provider's error on the models and embeddings routes reaches the client as the
provider sent it, status, body and the headers the SDKs read to retry, plain and under
``/s/{id}/v1``, as a chat's does (test_sdk_retry_headers.py)."""

from __future__ import annotations

import openai
import pytest

from tests.fakes.replies import error
from tests.fakes.upstream import EMBEDDINGS, MODELS, FakeUpstream
from tests.integration.api.conftest import ProxyServer

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
