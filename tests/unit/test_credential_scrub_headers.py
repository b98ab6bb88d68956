"""The response headers the proxy relays from a provider (its request id, rate limits,
Retry-After: ``answers.response_headers``) never carry the credential the call sent: a
provider or gateway that echoes the ``Authorization`` it got in one would otherwise hand the
operator's ``apiKeyEnv`` key to every tenant's client, success or error, whole or streamed."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.answers import Answer, response_headers
from proxy.config import ProviderConfig
from proxy.transport import build_client
from proxy.upstream import Upstream

KEY = "sk-provider-0123456789"
_KEYED = ProviderConfig(base_url="http://llm.test/v1", apiKeyEnv="LLM_KEY")
_SENT: dict[str, Any] = {"client_headers": {}, "content": b"{}"}


def _echoing(status: int) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        sent = request.headers["authorization"]
        echoed = {
            "x-request-id": f"req-{sent}",
            "x-ratelimit-remaining-requests": f"9 ({sent.partition(' ')[2]})",
            "openai-processing-ms": "12",
        }
        return httpx.Response(status, headers=echoed, json={"choices": []})

    return httpx.MockTransport(answer)


@pytest.mark.parametrize("status", [200, 429])
async def test_relayed_headers_hold_no_credential(status: int) -> None:
    upstream = Upstream(build_client(transport=_echoing(status)), env={"LLM_KEY": KEY})
    try:
        whole = await upstream.call(_KEYED, "POST", "/chat/completions", **_SENT)
        streamed = await upstream.open_stream(_KEYED, "/chat/completions", **_SENT)
        await streamed.aclose()
    finally:
        await upstream.client.aclose()
    for answer in (whole, streamed):
        relayed = response_headers(answer)
        assert KEY not in repr(relayed)
        assert relayed["x-request-id"] == "req-Bearer [REDACTED]"
        assert relayed["x-ratelimit-remaining-requests"] == "9 ([REDACTED])"
        assert relayed["openai-processing-ms"] == "12"


@pytest.mark.parametrize(
    ("key", "media"),
    [("stream", "text/event-stream"), ("charset", "application/json; charset=utf-8")],
)
def test_a_credential_spelt_in_the_media_type_leaves_the_content_type_as_sent(
    key: str, media: str
) -> None:
    """A placeholder key (a keyless local server's) that is a word of the media type: the
    content type, which no gateway echoes a credential in, is what the client reads the body
    by, and goes out as the provider sent it; an id echoing the key is still scrubbed."""
    sent = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    sent.headers["authorization"] = f"Bearer {key}"
    answer = httpx.Response(200, headers={"content-type": media, "x-request-id": f"r-{key}"})
    relayed = response_headers(Answer(200, answer.headers, b"{}", sent))
    assert relayed == {"content-type": media, "x-request-id": "r-[REDACTED]"}
